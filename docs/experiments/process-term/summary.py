"""Device-timed cases of `opbench ab` runs by verdict, among those whose base runs >= 5 us a call.

    python3 summary.py RUNS_DIR NAME...    (RUNS_DIR holds NAME-ab.csv, NAME-base/)

Prints per run: device cases >= 5 us, how many are same / slower / faster / ambiguous, and
the global device line (the `all device cases` family).
"""
import csv, statistics as st, sys, os


def key_of(row):
    return "/".join(row[c] for c in ("op", "variant", "site", "model", "phase")) + \
        f"/b{row['batch']}/q{row['q_len']}" + (f"/kv{row['kv_len']}" if row["kv_len"] else "") + \
        f"/{row['dtype']}/{row['device']}/{row['mode']}"


def per_call(runs, name):
    xs = {}
    with open(os.path.join(runs, f"{name}-base", "samples.csv")) as f:
        for r in csv.DictReader(f):
            xs.setdefault(key_of(r), []).append(float(r["total_ns"]) / float(r["iters"]))
    return {k: st.median(v) for k, v in xs.items()}


def main():
    runs = sys.argv[1]
    print("run,device_cases_ge_5us,same,slower,faster,ambiguous,all_device_change,all_device_interval,all_device_verdict")
    for name in sys.argv[2:]:
        us = per_call(runs, name)
        counts = {"same": 0, "slower": 0, "faster": 0, "ambiguous": 0}
        glob = None
        with open(os.path.join(runs, f"{name}-ab.csv")) as f:
            for r in csv.DictReader(f):
                if r["level"] == "family" and r["name"] == "all device cases":
                    glob = r
                if r["level"] != "case" or r["kind"] != "device":
                    continue
                if us.get(r["name"], 0) < 5000:
                    continue
                v = r["verdict"].split(" ")[0]
                counts[v if v in counts else "ambiguous"] += 1
        n = sum(counts.values())
        pct = lambda x: f"{100 * (float(x) - 1):+.1f}%"
        print(f"{name},{n},{counts['same']},{counts['slower']},{counts['faster']},{counts['ambiguous']},"
              f"{pct(glob['ratio'])},[{pct(glob['ratio_low'])} {pct(glob['ratio_high'])}],{glob['verdict']}")


if __name__ == "__main__":
    main()
