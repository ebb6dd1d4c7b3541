"""The GPU timeline of a decode run, read from a gpuprof trace (bench/gpuprof/trace.c; the format is
in its header comment): the trace split into tokens, where each token's time goes, the AllReduce
cuts, and what changes between two traces. Pure functions of the trace; the reports are JSON-ready
dicts that table.py renders (`gpu.py profile-report`, `profile-compare`, and the profile job).

Tokens. In a decode run (one token per llama_decode, the host synchronising after each) the GPU
idles between tokens. A kernel matching --token-start (the anchor; get_rows by default) runs once
per token on each stream that runs it (one kernel, or several in a row); the token boundary is the
largest gap between kernels from one token's anchors to the next's, i.e. the host's synchronise.
The anchor need not open the token: for one token the embedding lookup runs on the CPU (libllama
keeps the input layer there), and the GPU's get_rows are the selection of the output rows in the
last layer. A token then runs from its
first kernel to the end of its last kernel or device-to-host copy (the logits); host-to-device
copies after its last kernel are the next token's inputs and belong to neither token's wall.

Cuts. A kernel matching --cut (the meta backend's AllReduce) waits for the partial sums: its
wait_in is its start minus the end of the latest kernel before it on any stream (its latest
producer), wait_out the gap from its end to the first kernel after it on any stream (its earliest
consumer); other cut kernels are neither. The cut window runs from the producer's end to the
consumer's start.
"""
from __future__ import annotations

import bisect
import functools
import gzip
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

GPU_KINDS = ("kernel", "memcpy", "memset")
TOP_CHANGES = 15   # kernels in a comparison
TOP_GAPS = 12      # pairs of kernels either side of idle gaps in a report

Lane = Tuple[int, int]   # (device, CUPTI stream id)


class TraceError(ValueError):
    pass


@dataclass(frozen=True)
class Record:
    kind: str          # kernel, memcpy, memset, driver, runtime
    start: int         # ns
    end: int
    device: int
    stream: int
    correlation: int
    graph: int
    name: str

    @property
    def lane(self) -> Lane:
        return (self.device, self.stream)

    @property
    def dur(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Options:
    token_start: str = "get_rows"       # regex: the anchor kernel, once per token and stream
    skip: int = 2                       # first tokens dropped (warm-up)
    tokens: int = 0                     # keep the last N tokens (0: all after --skip)
    cut: str = "ggml_meta_allreduce"    # regex: the AllReduce kernels


# ---- reading -----------------------------------------------------------------------------------

def parse(lines: Iterable[str], source: str = "trace") -> List[Record]:
    """Records of a trace's lines ('#' lines and blank lines skipped)."""
    out = []
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        f = line.split("\t", 7)
        if len(f) != 8:
            raise TraceError(f"{source}:{n}: {len(f)} fields, want 8 (kind start end device stream correlation graph name)")
        try:
            out.append(Record(f[0], int(f[1]), int(f[2]), int(f[3]), int(f[4]), int(f[5]), int(f[6]), f[7]))
        except ValueError:
            raise TraceError(f"{source}:{n}: not a number in {line!r}") from None
    return out


def read(path: Path) -> List[Record]:
    """A trace file, gzip-compressed or not."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", errors="replace") as f:  # type: ignore[operator]
        return parse(f, p.name)


# ---- names -------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def short_name(name: str) -> str:
    """A kernel's name without template arguments and parameters: the qualified name of an
    Itanium-mangled symbol (_Z...), any other name unchanged. Not a full demangler: an encoding it
    does not follow gives the first identifier."""
    if not name.startswith("_Z"):
        return name
    try:
        parts = _Demangler(name).names()
        if parts:
            return "::".join(parts)
    except (IndexError, ValueError):
        pass
    m = re.match(r"_ZL?N?[rVK]*(\d+)", name)
    if m:
        i = m.end()
        return name[i:i + int(m.group(1))]
    return name


class _Demangler:
    """Just enough of the Itanium grammar to find a function's name and skip template arguments."""
    STD_SUBS = "tabsiod"

    def __init__(self, s: str):
        self.s, self.i = s, 2

    def peek(self, k: int = 0) -> str:
        return self.s[self.i + k]

    def number(self) -> int:
        j = self.i
        while self.s[j].isdigit():
            j += 1
        n, self.i = int(self.s[self.i:j]), j
        return n

    def source_name(self) -> str:
        n = self.number()
        name = self.s[self.i:self.i + n]
        if len(name) != n:
            raise ValueError("short identifier")
        self.i += n
        return "(anonymous)" if name.startswith("_GLOBAL__N") else name

    def names(self) -> List[str]:
        if self.peek() == "L":
            self.i += 1
        if self.peek() == "N":
            return self.nested()
        if self.s.startswith("St", self.i):
            self.i += 2
            return ["std", self.source_name()]
        if self.peek().isdigit():
            return [self.source_name()]
        raise ValueError("unknown encoding")

    def nested(self) -> List[str]:
        self.i += 1
        while self.peek() in "rVKRO":
            self.i += 1
        parts: List[str] = []
        while self.peek() != "E":
            c = self.peek()
            if c.isdigit():
                parts.append(self.source_name())
            elif c == "I":
                self.skip_args()
            elif c == "S":
                if self.peek(1) == "t":
                    parts.append("std")
                self.substitution()
            elif c in "CD" and self.peek(1) in "0123":   # constructor, destructor
                parts.append(("~" if c == "D" else "") + (parts[-1] if parts else "?"))
                self.i += 2
            else:
                raise ValueError(f"nested name component {c!r}")
        return parts

    def substitution(self) -> None:
        if self.peek(1) in self.STD_SUBS:
            self.i += 2
        else:
            self.i = self.s.index("_", self.i) + 1

    def skip_args(self) -> None:
        """From an I (or any opener) to its matching E."""
        self.i += 1
        depth = 1
        while depth:
            c = self.peek()
            if c.isdigit():
                self.source_name()
            elif c == "L":
                self.skip_literal()
            elif c in "INJXF":
                depth += 1
                self.i += 1
            elif c == "E":
                depth -= 1
                self.i += 1
            elif c == "S":
                self.substitution()
            elif c in "TA":            # T<seq>_, A<dim>_
                self.i = self.s.index("_", self.i) + 1
            elif c == "D":             # Dh, Dn, Dp, ... ; Dv<n>_ a vector type
                self.i = self.s.index("_", self.i) + 1 if self.peek(1) == "v" else self.i + 2
            else:
                self.i += 1

    def skip_literal(self) -> None:
        """L <type> <value> E; an external name (L_Z...E) is not followed."""
        self.i += 1
        c = self.peek()
        if c == "_":
            raise ValueError("external name literal")
        if c.isdigit():
            self.source_name()
        elif c == "N":
            self.skip_args()
        elif c == "S":
            self.substitution()
        elif c == "D":
            self.i += 2
        else:
            self.i += 1
        while self.peek() != "E":
            self.i += 1
        self.i += 1


# ---- intervals ---------------------------------------------------------------------------------

def merge(intervals: Iterable[Tuple[int, int]]) -> List[Tuple[int, int]]:
    """The union of intervals as sorted, disjoint intervals."""
    out: List[List[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def covered(intervals: Iterable[Tuple[int, int]], lo: int, hi: int) -> int:
    """The length of the union of intervals inside [lo, hi]."""
    return sum(max(0, min(e, hi) - max(s, lo)) for s, e in merge(intervals))


# ---- tokens ------------------------------------------------------------------------------------

@dataclass
class Token:
    index: int                 # in the whole trace, from 0
    records: List[Record]      # GPU records from its first kernel to the next token's first kernel
    kernels: List[Record] = field(init=False)
    start: int = field(init=False)   # its first kernel's start
    end: int = field(init=False)     # the end of its last kernel or device-to-host copy

    def __post_init__(self) -> None:
        self.kernels = [r for r in self.records if r.kind == "kernel"]
        self.start = min(k.start for k in self.kernels)
        self.end = max([k.end for k in self.kernels]
                       + [r.end for r in self.records if r.kind == "memcpy" and r.name == "DtoH"])

    @property
    def wall(self) -> int:
        return self.end - self.start

    @property
    def busy(self) -> int:
        return covered(((r.start, r.end) for r in self.records), self.start, self.end)


def anchor_groups(kernels: Sequence[Record], pattern: "re.Pattern[str]") -> List[List[Record]]:
    """The anchors (kernels matching pattern) in groups of one token. Each stream runs the anchor
    once per token, as one kernel or as consecutive ones (libllama selects the output rows of two
    tensors, two get_rows in a row); a group ends where a stream starts another such run."""
    run_id: Dict[int, int] = {}        # index in kernels -> the number of its run on its stream
    runs: Dict[Lane, int] = {}
    previous: Dict[Lane, bool] = {}    # whether the stream's previous kernel was an anchor
    order = sorted(range(len(kernels)), key=lambda i: kernels[i].start)
    for i in order:
        k = kernels[i]
        hit = bool(pattern.search(k.name))
        if hit:
            if not previous.get(k.lane):
                runs[k.lane] = runs.get(k.lane, 0) + 1
            run_id[i] = runs[k.lane]
        previous[k.lane] = hit
    groups: List[List[Record]] = []
    current: Dict[Lane, int] = {}
    for i in (i for i in order if i in run_id):
        k = kernels[i]
        if not groups or current.get(k.lane, run_id[i]) != run_id[i]:
            groups.append([])
            current = {}
        groups[-1].append(k)
        current[k.lane] = run_id[i]
    return groups


def largest_gap(gaps: Sequence[Tuple[int, int]], lo: int, hi: int) -> Optional[Tuple[int, int]]:
    """The largest gap (end, start) with lo <= end and start <= hi."""
    inside = [(e, s) for e, s in gaps if e >= lo and s <= hi]
    return max(inside, key=lambda g: g[1] - g[0]) if inside else None


def split_tokens(records: Sequence[Record], token_start: str) -> List[Token]:
    """The GPU records in tokens (module doc). Between consecutive anchor groups the boundary is
    the largest kernel gap; the first token starts after the last gap before its anchors, and the
    last ends at the first gap after its anchors, that is at least half the median boundary gap
    (work before the first token and after the last, e.g. at teardown, is no token's)."""
    gpu = sorted((r for r in records if r.kind in GPU_KINDS), key=lambda r: r.start)
    kernels = [r for r in gpu if r.kind == "kernel"]
    groups = anchor_groups(kernels, re.compile(token_start))
    if not groups:
        raise TraceError(f"no kernel matches --token-start {token_start!r}")
    runs = merge((k.start, k.end) for k in kernels)
    gaps = [(e, s) for (_, e), (s, _) in zip(runs, runs[1:])]
    bounds, sizes = [], []
    for prev, g in zip(groups, groups[1:]):
        hi = min(a.start for a in g)
        gap = largest_gap(gaps, max(a.start for a in prev), hi)
        bounds.append(hi if gap is None else gap[1])
        if gap is not None:
            sizes.append(gap[1] - gap[0])
    enough = statistics.median(sizes) / 2 if sizes else 0
    first, last = min(a.start for a in groups[0]), max(a.start for a in groups[-1])
    before = [s for e, s in gaps if s <= first and s - e >= enough > 0]
    after = [s for e, s in gaps if e >= last and s - e >= enough > 0]
    bounds = [before[-1] if before else runs[0][0]] + bounds + [after[0] if after else gpu[-1].start + 1]
    starts = [r.start for r in gpu]
    return [Token(i, gpu[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, hi)])
            for i, (lo, hi) in enumerate(zip(bounds, bounds[1:]))]


def kept(tokens: Sequence[Token], opt: Options) -> List[Token]:
    if len(tokens) <= opt.skip:
        raise TraceError(f"{len(tokens)} token(s) found, all dropped by --skip {opt.skip}")
    out = list(tokens[opt.skip:])
    return out[-opt.tokens:] if opt.tokens else out


# ---- cuts --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cut:
    kernel: Record
    producer_end: Optional[int]     # the latest other kernel that ended by its start
    consumer_start: Optional[int]   # the earliest other kernel that started after its end

    @property
    def wait_in(self) -> Optional[int]:
        return None if self.producer_end is None else self.kernel.start - self.producer_end

    @property
    def wait_out(self) -> Optional[int]:
        return None if self.consumer_start is None else self.consumer_start - self.kernel.end

    @property
    def window(self) -> Tuple[int, int]:
        lo = self.kernel.start if self.producer_end is None else self.producer_end
        hi = self.kernel.end if self.consumer_start is None else self.consumer_start
        return lo, hi


def cuts(token: Token, cut: str) -> List[Cut]:
    """Each cut kernel of the token with its latest producer and earliest consumer (non-cut
    kernels of the token, on any stream)."""
    pattern = re.compile(cut)
    is_cut = [bool(pattern.search(k.name)) for k in token.kernels]
    others = [k for k, c in zip(token.kernels, is_cut) if not c]
    ends = sorted(k.end for k in others)
    starts = sorted(k.start for k in others)
    out = []
    for k, c in zip(token.kernels, is_cut):
        if not c:
            continue
        i = bisect.bisect_right(ends, k.start)
        j = bisect.bisect_left(starts, k.end)
        out.append(Cut(k, ends[i - 1] if i else None, starts[j] if j < len(starts) else None))
    return out


# ---- statistics --------------------------------------------------------------------------------

def percentile(xs: Sequence[float], p: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    v = sorted(xs)
    k = (len(v) - 1) * p / 100
    f = int(k)
    c = min(f + 1, len(v) - 1)
    return v[f] + (v[c] - v[f]) * (k - f)


def us(ns: float) -> float:
    return round(ns / 1000, 3)


def spread(xs_ns: Sequence[float]) -> Dict:
    """median, p10, p90 (µs) and the count."""
    if not xs_ns:
        return {"n": 0}
    return {"median": us(statistics.median(xs_ns)), "p10": us(percentile(xs_ns, 10)),
            "p90": us(percentile(xs_ns, 90)), "n": len(xs_ns)}


def med_min(xs: Sequence[float], scale=us) -> Dict:
    return {"median": scale(statistics.median(xs)), "min": scale(min(xs))}


def _count(x: float) -> float:
    return round(x, 3)


# ---- idle gaps ---------------------------------------------------------------------------------

GAP_BUCKETS_US = (0.5, 1, 2, 5, 20, 100)   # upper bounds of the gap sizes' buckets; the last is open
WHERE = ("cut window", "inside one graph", "between launches")


@dataclass(frozen=True)
class Gap:
    start: int           # the end of the GPU work before it
    end: int             # the start of the GPU work after it
    before: Record       # the record that ends at start (the latest-starting one, if several)
    after: Record        # the record that starts at end
    where: str           # one of WHERE

    @property
    def size(self) -> int:
        return self.end - self.start


def gaps(token: Token, windows: Sequence[Tuple[int, int]]) -> List[Gap]:
    """The token's idle time as gaps between its GPU work (every stream's records merged), each with
    the records either side and where it lies: in a cut window, between two records of the same
    CUDA graph (the driver's scheduling inside a graph), or else between launches (the host's
    pace: separate kernels, or two graphs)."""
    recs = sorted(token.records, key=lambda r: (r.start, r.end))
    out = []
    reach, last = None, None   # the end of the work so far, and the record that reached it
    for r in recs:
        if reach is not None and r.start > reach and token.start <= reach and r.start <= token.end:
            if any(lo < r.start and hi > reach for lo, hi in windows):
                where = WHERE[0]
            elif last.graph and last.graph == r.graph:
                where = WHERE[1]
            else:
                where = WHERE[2]
            out.append(Gap(reach, r.start, last, r, where))
        if reach is None or r.end >= reach:
            reach, last = r.end, r
    return out


def bucket(size_ns: int) -> str:
    """The bucket label of a gap's size (GAP_BUCKETS_US)."""
    lo = 0.0
    for hi in GAP_BUCKETS_US:
        if size_ns < hi * 1000:
            return f"{lo:g}-{hi:g}"
        lo = hi
    return f">= {lo:g}"


def gap_summary(token_gaps: List[List[Gap]]) -> Dict:
    """Per token, as means over the tokens (so that the places add up to the mean idle time):
    idle by where it lies, gaps by size, and the pairs of kernels (before -> after) whose gaps add
    up to most idle time; and the largest gap of a token (median and min)."""
    n = len(token_gaps)
    where = {w: sum(g.size for gs in token_gaps for g in gs if g.where == w) for w in WHERE}
    counts = {w: sum(1 for gs in token_gaps for g in gs if g.where == w) for w in WHERE}
    largest = [max((g.size for g in gs), default=0) for gs in token_gaps]
    sizes: Dict[str, List[int]] = {}
    pairs: Dict[Tuple[str, str, str], List[int]] = {}
    for gs in token_gaps:
        for g in gs:
            e = sizes.setdefault(bucket(g.size), [0, 0])
            e[0] += 1
            e[1] += g.size
            key = (short_name(g.before.name), short_name(g.after.name), g.where)
            e = pairs.setdefault(key, [0, 0])
            e[0] += 1
            e[1] += g.size
    labels = [bucket(int(b * 1000) - 1) for b in GAP_BUCKETS_US] + [bucket(GAP_BUCKETS_US[-1] * 1000)]
    return {
        "where": [{"where": w, "us_per_token": us(where[w] / n), "gaps_per_token": _count(counts[w] / n)}
                  for w in WHERE],
        "largest_us": med_min(largest),
        "sizes": [{"bucket": b, "gaps_per_token": _count(sizes[b][0] / n), "us_per_token": us(sizes[b][1] / n)}
                  for b in labels if b in sizes],
        "pairs": [{"before": b, "after": a, "where": w, "gaps_per_token": _count(c / n), "us_per_token": us(t / n),
                   "mean_us": us(t / c)}
                  for (b, a, w), (c, t) in sorted(pairs.items(), key=lambda kv: (-kv[1][1], kv[0]))][:TOP_GAPS],
    }


# ---- one trace ---------------------------------------------------------------------------------

def analyse(records: Sequence[Record], opt: Options, source: str = "") -> Dict:
    """The report of one trace (module doc): tokens, per-token wall/busy/idle, streams, kernels by
    time, cuts, and the API calls when the trace has them."""
    all_tokens = split_tokens(records, opt.token_start)
    toks = kept(all_tokens, opt)
    n = len(toks)
    rows = []
    all_lanes = sorted({k.lane for t in toks for k in t.kernels})
    lane_kernels: Dict[Lane, List[int]] = {lane: [] for lane in all_lanes}
    lane_time: Dict[Lane, List[int]] = {lane: [] for lane in all_lanes}
    names: Dict[str, List[int]] = {}   # short name -> [count, total ns]
    token_cuts: List[List[Cut]] = []
    token_gaps: List[List[Gap]] = []
    for t in toks:
        cs = cuts(t, opt.cut)
        token_cuts.append(cs)
        token_gaps.append(gaps(t, [c.window for c in cs]))
        window = covered((c.window for c in cs), t.start, t.end)
        rows.append({"index": t.index, "start_ns": t.start, "wall_us": us(t.wall), "busy_us": us(t.busy),
                     "idle_us": us(t.wall - t.busy), "kernels": len(t.kernels),
                     "streams": len({k.lane for k in t.kernels}), "cut_kernels": len(cs), "cut_window_us": us(window)})
        for lane in all_lanes:
            mine = [k for k in t.kernels if k.lane == lane]
            lane_kernels[lane].append(len(mine))
            lane_time[lane].append(sum(k.dur for k in mine))
        for k in t.kernels:
            e = names.setdefault(short_name(k.name), [0, 0])
            e[0] += 1
            e[1] += k.dur
    total_kernel = sum(e[1] for e in names.values()) or 1
    kernels = [{"name": name, "us_per_token": us(tot / n), "count_per_token": _count(cnt / n),
                "mean_us": us(tot / cnt), "share": round(tot / total_kernel, 4)}
               for name, (cnt, tot) in sorted(names.items(), key=lambda kv: (-kv[1][1], kv[0]))]
    streams = [{"stream": f"{d}:{s}", "kernels_per_token": _count(statistics.median(lane_kernels[(d, s)])),
                "kernel_us_per_token": us(statistics.median(lane_time[(d, s)]))}
               for d, s in all_lanes]
    return {
        "trace": source,
        "options": {"token_start": opt.token_start, "skip": opt.skip, "tokens": opt.tokens, "cut": opt.cut},
        "tokens_found": len(all_tokens),
        "tokens_kept": n,
        "summary": {key: med_min([r[key] for r in rows], scale=float)
                    for key in ("wall_us", "busy_us", "idle_us", "kernels", "streams", "cut_window_us")},
        "tokens": rows,
        "streams": streams,
        "kernels": kernels,
        "cuts": cut_summary(token_cuts, rows),
        "idle": gap_summary(token_gaps),
        "api": api_summary(records, toks),
    }


def cut_summary(token_cuts: List[List[Cut]], rows: List[Dict]) -> Optional[Dict]:
    """Cuts per token (cut kernels over the streams that run them: one kernel per launching GPU
    and cut) and the spread of wait_in, dur and wait_out over every cut kernel kept."""
    every = [c for cs in token_cuts for c in cs]
    if not every:
        return None
    lanes = len({c.kernel.lane for c in every})
    per_token = statistics.median(len(cs) for cs in token_cuts)
    return {"kernels_per_token": _count(per_token), "streams": lanes, "per_token": _count(per_token / lanes),
            "wait_in_us": spread([c.wait_in for c in every if c.wait_in is not None]),
            "dur_us": spread([c.kernel.dur for c in every]),
            "wait_out_us": spread([c.wait_out for c in every if c.wait_out is not None]),
            "window_us_per_token": med_min([r["cut_window_us"] for r in rows], scale=float)}


def api_summary(records: Sequence[Record], toks: Sequence[Token]) -> List[Dict]:
    """Host API calls (GPUPROF_API=1) from the first kept token's start to the last one's end:
    calls per token and mean duration, by function."""
    lo, hi = toks[0].start, toks[-1].end
    calls: Dict[str, List[int]] = {}
    for r in records:
        if r.kind in ("driver", "runtime") and lo <= r.start <= hi:
            e = calls.setdefault(r.name, [0, 0])
            e[0] += 1
            e[1] += r.dur
    n = len(toks)
    return [{"name": name, "calls_per_token": _count(cnt / n), "mean_us": us(tot / cnt)}
            for name, (cnt, tot) in sorted(calls.items(), key=lambda kv: (-kv[1][0], kv[0]))]


def analyse_file(path: Path, opt: Options) -> Dict:
    return analyse(read(path), opt, Path(path).name)


# ---- two traces --------------------------------------------------------------------------------

def compare(a: Dict, b: Dict) -> Dict:
    """B against A (reports of analyse): median wall, busy and idle per token, the mean idle by
    where its gaps lie, their difference per cut of B, and the kernels whose time per token
    changed most."""
    cut_b = (b.get("cuts") or {}).get("per_token") or 0
    out: Dict = {"a": a["trace"], "b": b["trace"], "cuts_per_token_b": cut_b}
    for key in ("wall_us", "busy_us", "idle_us"):
        va, vb = a["summary"][key]["median"], b["summary"][key]["median"]
        out[key] = {"a": va, "b": vb, "diff": round(vb - va, 3),
                    "per_cut": round((vb - va) / cut_b, 3) if cut_b else None}
    out["idle_where"] = []
    if a.get("idle") and b.get("idle"):
        in_a = {w["where"]: w["us_per_token"] for w in a["idle"]["where"]}
        for wb in b["idle"]["where"]:
            va, vb = in_a.get(wb["where"], 0.0), wb["us_per_token"]
            out["idle_where"].append({"where": wb["where"], "a": va, "b": vb, "diff": round(vb - va, 3),
                                      "per_cut": round((vb - va) / cut_b, 3) if cut_b else None})
    ka = {k["name"]: k for k in a["kernels"]}
    kb = {k["name"]: k for k in b["kernels"]}
    changes = []
    for name in set(ka) | set(kb):
        ta, tb = ka.get(name, {}).get("us_per_token", 0.0), kb.get(name, {}).get("us_per_token", 0.0)
        changes.append({"name": name, "a_us": ta, "b_us": tb, "diff_us": round(tb - ta, 3),
                        "a_count": ka.get(name, {}).get("count_per_token", 0.0),
                        "b_count": kb.get(name, {}).get("count_per_token", 0.0)})
    changes.sort(key=lambda c: (-abs(c["diff_us"]), c["name"]))
    out["kernels"] = changes[:TOP_CHANGES]
    return out
