#!/usr/bin/env python3
"""llama-cpp-python on this library: tensor parallelism through llama-cpp-python's own API.

Run with the Python that has llama-cpp-python installed with our backend layer spliced in
(README, "llama-cpp-python"). It loads MODEL twice through llama-cpp-python's bindings of
libllama (`llama_cpp.llama_model_load_from_file`, `llama_init_from_model`, `llama_decode`, ...):
once with split mode NONE on the default device, once with LLAMA_SPLIT_MODE_TENSOR over two
devices (DEVICES, default CPU,CPU: the meta device splits weights, KV cache and compute over
both). It decodes the same prompt greedily in both and passes when the tokens are the same.
It also checks that the library in the process is ours (`ggml_backend_rs_builtin_regs`, a
symbol only our spliced libggml has): a wheel built without the splice would pass otherwise.

    python3 llama_cpp_python_tp.py --model tiny-gqa-f32.gguf [--devices CPU,CPU] [--n-predict 12]

Exit status 0 when the tokens agree; 1 with a message on any failure.
"""

import argparse
import ctypes
import sys

import llama_cpp
from llama_cpp import _ggml

PROMPT = b"The quick brown fox jumps over the lazy dog. Once upon a time"


def fail(msg: str) -> "None":
    print(f"llama_cpp_python_tp: {msg}", file=sys.stderr)
    sys.exit(1)


def devices_array(names):
    """libllama's NULL-terminated device list, from ggml's registry in this process."""
    lib = _ggml.libggml
    lib.ggml_backend_dev_by_name.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_dev_by_name.restype = ctypes.c_void_p
    devs = []
    for name in names:
        d = lib.ggml_backend_dev_by_name(name.encode())
        if not d:
            fail(f"no device {name} in ggml's registry")
        devs.append(d)
    return (ctypes.c_void_p * (len(devs) + 1))(*devs, None)


def decode(model_path: str, devices, n_predict: int):
    """Greedy tokens of PROMPT: split none (devices None) or tensor over `devices`."""
    mp = llama_cpp.llama_model_default_params()
    keep = None
    if devices is not None:
        keep = devices_array(devices)
        mp.devices = ctypes.cast(keep, ctypes.c_void_p)
        mp.split_mode = llama_cpp.LLAMA_SPLIT_MODE_TENSOR
    else:
        mp.split_mode = llama_cpp.LLAMA_SPLIT_MODE_NONE
    model = llama_cpp.llama_model_load_from_file(model_path.encode(), mp)
    if not model:
        fail(f"loading {model_path} failed ({'tensor over ' + ','.join(devices) if devices else 'split none'})")
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = 256
    cp.n_batch = 256
    cp.n_threads = 1
    cp.n_threads_batch = 1
    cp.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    ctx = llama_cpp.llama_init_from_model(model, cp)
    if not ctx:
        llama_cpp.llama_model_free(model)
        fail("creating the context failed")
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        toks = (llama_cpp.llama_token * (len(PROMPT) + 8))()
        n = llama_cpp.llama_tokenize(vocab, PROMPT, len(PROMPT), toks, len(toks), True, False)
        if n <= 0:
            fail(f"tokenization failed ({n})")
        out = []
        batch = llama_cpp.llama_batch_get_one(toks, n)
        for step in range(n_predict):
            rc = llama_cpp.llama_decode(ctx, batch)
            if rc != 0:
                fail(f"llama_decode (step {step}) returned {rc}")
            logits = llama_cpp.llama_get_logits_ith(ctx, -1)
            best = max(range(n_vocab), key=lambda i: logits[i])
            out.append(best)
            nxt = (llama_cpp.llama_token * 1)(best)
            batch = llama_cpp.llama_batch_get_one(nxt, 1)
        return out
    finally:
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)
        del keep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--devices", default="CPU,CPU")
    ap.add_argument("--n-predict", type=int, default=12)
    args = ap.parse_args()

    try:
        _ggml.libggml.ggml_backend_rs_builtin_regs
    except AttributeError:
        fail("this llama-cpp-python's libggml is upstream's: ggml-backend-rs is not spliced in")
    llama_cpp.llama_backend_init()
    none = decode(args.model, None, args.n_predict)
    tensor = decode(args.model, args.devices.split(","), args.n_predict)
    print(f"llama_cpp_python_tp: llama-cpp-python {llama_cpp.__version__}")
    print(f"llama_cpp_python_tp: split none:   {none}")
    print(f"llama_cpp_python_tp: tensor {args.devices}: {tensor}")
    if none != tensor:
        fail("tensor parallelism gave other tokens than split none")
    print("llama_cpp_python_tp: the same tokens")


if __name__ == "__main__":
    main()
