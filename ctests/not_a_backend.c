// A shared library that is not a ggml backend: it exports no ggml_backend_init.
int not_a_backend(void);
int not_a_backend(void) { return 0; }
