#!/usr/bin/env python3
"""Paper estimate: when does tensor parallelism over ggml-rpc pay, against layer split over the
same servers? Per decoded token, for a Llama-shaped model spread over K servers whose GPUs stream
their share of the weights at a memory bandwidth, and links of 1, 10 and 100 Gbit/s.

    python3 bench/rpc_estimate.py [--servers K] [--mem-tbs TB/s] [--rtt-us 1G,10G,100G]

The model of the cost (assumptions, not measurements; docs/benchmarks.md discusses them):
  * decode is bound by streaming the weights: layer split runs the servers one after the other
    (W / B for the whole model), tensor split side by side (W / (K B));
  * tensor split has two cuts per layer, each an AllReduce of one f32 row of n_embd (P bytes);
  * client-mediated (what ggml-rpc allows today: no copies between servers; our staged path):
    per cut the servers idle for a round trip (the client's reads, sent after their sub-graphs,
    and the answers) and half of one (its writes of the sums, before the next sub-graph), with
    K * P bytes coming in and then K * P going out through the client's link;
  * server to server (a peer exchange RPC does not have): per cut each server sends its partial
    to the others at once (one-shot, for rows this small), half a round trip and (K - 1) * P
    bytes in each direction of its link;
  * layer split: per token each of the K stage boundaries passes through the client, a round
    trip and a half and P bytes in and out.
"""
from __future__ import annotations

import argparse

MODELS = {  # name: (layers, n_embd, weight bytes)
    "8B f16": (32, 4096, 16.1e9),
    "8B Q4_0": (32, 4096, 4.7e9),
    "70B f16": (80, 8192, 141e9),
    "70B Q4_0": (80, 8192, 40e9),
}
LINKS = [(1, 50.0), (10, 50.0), (100, 20.0)]  # Gbit/s, round trip in µs (TCP, one switch)


def per_token_ms(layers: int, n_embd: int, weights: float, k: int, mem_tbs: float, gbits: float,
                 rtt_us: float) -> dict:
    p = n_embd * 4                       # bytes of one f32 row
    bw = gbits * 1e9 / 8                 # bytes per second
    stream = weights / (mem_tbs * 1e12)  # seconds to stream all weights once
    cuts = 2 * layers
    rtt = rtt_us * 1e-6
    layer = stream + k * (1.5 * rtt + 2 * p / bw)
    client = stream / k + cuts * (1.5 * rtt + 2 * k * p / bw)
    peer = stream / k + cuts * (rtt / 2 + (k - 1) * p / bw)
    return {"layer": layer * 1e3, "client": client * 1e3, "peer": peer * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--mem-tbs", type=float, default=3.35, help="each server's memory bandwidth, TB/s [H100: 3.35]")
    ap.add_argument("--rtt-us", default=",".join(str(r) for _, r in LINKS),
                    help="round trip per link speed (1, 10, 100 Gbit/s), µs [50,50,20]")
    a = ap.parse_args()
    rtts = [float(x) for x in a.rtt_us.split(",")]
    print(f"{a.servers} servers, {a.mem_tbs} TB/s each; ms per decoded token "
          f"(tensor: client-mediated / server to server; speed-up against layer split)\n")
    print("| model | link | layer split | tensor, client-mediated | tensor, server to server |")
    print("|---|---|---|---|---|")
    for name, (layers, n_embd, w) in MODELS.items():
        for (gbits, _), rtt in zip(LINKS, rtts):
            t = per_token_ms(layers, n_embd, w, a.servers, a.mem_tbs, gbits, rtt)
            print(f"| {name} | {gbits} Gbit/s, {rtt:g} µs | {t['layer']:.1f} | {t['client']:.1f} "
                  f"({t['layer'] / t['client']:.2f}×) | {t['peer']:.1f} ({t['layer'] / t['peer']:.2f}×) |")


if __name__ == "__main__":
    main()
