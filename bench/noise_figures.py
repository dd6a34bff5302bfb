"""bench/noise_figures.py - tables and the figure of docs/noise.md from the JSON reports of
`verdict compare` that examples/torch/noise_demo.sh leaves in build/noise (python3, standard
library only).

    python3 bench/noise_figures.py build/noise docs/img/noise_bound_vs_observed.svg

Prints, per configuration and precision, the verdict, the tensors compared, how many must be
bit-identical, how many differ, and the distribution of realistic bound / observed deviation on
the tensors that differ; per bug, the verdict, the first tensor beyond rounding and its first point of departure.  Writes one
SVG: observed deviation (x) against realistic bound (y), log-log, every tensor that differs, one
colour per precision, with the lines bound = observed and bound = 10 x observed.
"""
import glob
import json
import math
import os
import sys


def pct(v, q):
    return v[min(len(v) - 1, int(q * (len(v) - 1)))]


def main(out, svg):
    rows, bugs, pts = [], [], {"float32": [], "bfloat16": []}
    for f in sorted(glob.glob(os.path.join(out, "*.json"))):
        base = os.path.basename(f)[:-5]
        if "." not in base:
            continue
        name, dt = base.rsplit(".", 1)
        if dt not in pts:
            continue
        try:
            j = json.load(open(f))
        except ValueError:
            continue
        if j.get("mode") != "compare":
            continue
        t = j["tensors"]
        s = j["summary"]
        diff = sorted(x["realistic"] / x["observed"] for x in t
                      if x.get("observed") and x["observed"] > 0 and x["status"] in ("within rounding", "beyond rounding"))
        verdict = "beyond" if s["beyond"] else "missing" if s["missing"] else "within"
        if name.startswith("bug_"):
            fb = j["first_beyond"]["name"] if j["first_beyond"] else "-"
            dep = j["departure"]["node"] if j.get("departure") else "-"
            bugs.append((name[4:], dt, verdict, j.get("plan_verdict") or "-", fb, dep,
                         j.get("inference_stopped_at") or "-"))
            continue
        for x in t:
            if x.get("observed") and x["observed"] > 0:
                pts[dt].append((x["observed"], x["realistic"]))
        rows.append((name, dt, verdict, len(t), s["bit_identical"], len(diff),
                     diff[0] if diff else 0, pct(diff, .1) if diff else 0, pct(diff, .5) if diff else 0,
                     pct(diff, .9) if diff else 0, diff[-1] if diff else 0,
                     sum(1 for r in diff if r <= 10) / len(diff) if diff else 0))
    print("| configuration | dtype | compare | tensors | bit-identical | differ | ratio min | p10 | median | p90 | max | within 10x |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %d | %d | %d | %.2f | %.2f | %.2f | %.2f | %.3g | %.0f%% |" % (r[:6] + r[6:11] + (100 * r[11],)))
    print()
    print("| bug | dtype | compare | plans (verdict) | first tensor beyond rounding | first point of departure | lineage inference stopped at |")
    print("|---|---|---|---|---|---|---|")
    for b in bugs:
        print("| %s | %s | %s | %s | `%s` | %s | %s |" % (b[0], b[1], b[2], b[3], b[4], b[5].replace("|", "/"),
                                                   b[6][:90].replace("|", "/")))
    write_svg(svg, pts)


def write_svg(path, pts):
    allv = [v for p in pts.values() for xy in p for v in xy if v > 0]
    if not allv:
        return
    lo = 10 ** math.floor(math.log10(min(allv)))
    hi = 10 ** math.ceil(math.log10(max(allv)))
    W, H, L, T = 520, 420, 70, 20

    def X(v):
        return L + (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * W

    def Y(v):
        return T + H - (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * H
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
         % (W + L + 160, H + T + 50),
         '<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (L, T, W, H)]
    e = math.log10(lo)
    while e <= math.log10(hi) + 1e-9:
        v = 10 ** e
        o.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#eee"/>' % (X(v), X(v), T, T + H))
        o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (L, L + W, Y(v), Y(v)))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">1e%d</text>' % (X(v), T + H + 14, round(e)))
        o.append('<text x="%d" y="%.1f" text-anchor="end">1e%d</text>' % (L - 4, Y(v) + 4, round(e)))
        e += 1
    o.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>' % (X(lo), Y(lo), X(hi), Y(hi)))
    o.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="4"/>'
             % (X(lo), Y(10 * lo), X(hi / 10), Y(hi)))
    col = {"float32": "#1f77b4", "bfloat16": "#d62728"}
    for dt, p in pts.items():
        seen = set()  # one dot per pixel and precision: the figure stays small
        for x, y in p:
            px = (round(X(x)), round(Y(y)))
            if px in seen:
                continue
            seen.add(px)
            o.append('<circle cx="%d" cy="%d" r="1.6" fill="%s" fill-opacity="0.5"/>' % (px[0], px[1], col[dt]))
    for i, dt in enumerate(pts):
        o.append('<circle cx="%d" cy="%d" r="4" fill="%s"/><text x="%d" y="%d">%s (%d tensors)</text>'
                 % (L + W + 15, T + 15 + 18 * i, col[dt], L + W + 25, T + 19 + 18 * i, dt, len(pts[dt])))
    o.append('<text x="%d" y="%d">solid: bound = observed</text>' % (L + W + 15, T + 70))
    o.append('<text x="%d" y="%d">dashed: bound = 10 x observed</text>' % (L + W + 15, T + 86))
    o.append('<text x="%d" y="%d" text-anchor="middle">observed deviation ||p - s|| / ||s|| (real run)</text>'
             % (L + W / 2, T + H + 34))
    o.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">realistic bound (verdict compare)</text>'
             % (T + H / 2, T + H / 2))
    o.append('</svg>')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
