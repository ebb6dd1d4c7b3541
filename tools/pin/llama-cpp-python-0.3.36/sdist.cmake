# llama-cpp-python 0.3.36 on PyPI (October 2026): its source archive vendors a whole llama.cpp
# tree of ggml 0.25.3 (ABI class E), with llama.cpp's tools (llama-server, llama-cli, llama-bench).
set(SDIST_URL "https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz")
set(SDIST_SHA256 "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")
set(SDIST_TREE "llama_cpp_python-0.3.36/vendor/llama.cpp")
