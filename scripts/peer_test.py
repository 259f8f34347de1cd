#!/usr/bin/env python3
"""Tests of scripts/peer.py on the CPU: its statistics, and a whole op pass into a run
directory (without transformers, as on a machine that lacks it), read back by column."""

import csv
import json
import os
import runpy
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import peer  # noqa: E402

PUBLISHED = ROOT / "results" / "2026-11-30-nvidia-h200-cuda-torch2.11.0-graphs-trace"


def rows_of(path: Path):
    with path.open() as f:
        return list(csv.DictReader(f))


def make_run(d: Path):
    """An empty run directory with the schema's headers (from a published run)."""
    d.mkdir(parents=True)
    (d / "env.json").write_text(json.dumps({"run_id": "t", "settings": {"profile": "quick", "models": "qwen3-0.6b"}}))
    for f in ("results.csv", "samples.csv"):
        with (PUBLISHED / f).open() as src:
            (d / f).write_text(src.readline())


class Estimate(unittest.TestCase):
    def test_median_interval_and_mad(self):
        med, mean, lo, hi, mad = peer.estimate([10.0, 11.0, 12.0, 13.0, 100.0])
        self.assertEqual(med, 12.0)
        self.assertAlmostEqual(mean, 29.2)
        self.assertLessEqual(lo, med)
        self.assertGreaterEqual(hi, med)
        self.assertEqual(mad, 1.0)


class OpPass(unittest.TestCase):
    def test_python_op_rows_without_transformers(self):
        with tempfile.TemporaryDirectory() as t:
            run = Path(t) / "r"
            make_run(run)
            code = (
                "import sys, runpy; sys.modules['transformers'] = None; "
                f"sys.argv = ['peer.py', {str(run)!r}, '--only', 'ops', '--batches', '1', '--ctx', '16', "
                "'--device', 'cpu', '--samples', '3', '--measure-ms', '20', '--warmup-ms', '5']; "
                f"runpy.run_path({str(ROOT / 'scripts' / 'peer.py')!r}, run_name='__main__')"
            )
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("transformers is not importable", out.stderr)
            rows = rows_of(run / "results.csv")
            got = {(r["op"], r["variant"], r["site"]): r for r in rows}
            for k in [("linear", "py-aten", "q_proj"), ("linear", "py-aten", "lm_head"), ("rmsnorm", "py-hf", "q_norm"),
                      ("rope", "py-rotate_half", "k"), ("sdpa", "py-auto", "attn"), ("kvcache", "py-cat", "v"),
                      ("eltwise", "py-aten", "residual_add"), ("eltwise", "py-aten", "silu"),
                      ("eltwise", "py-aten", "swiglu_mul"), ("eltwise", "py-aten", "attn_contiguous"),
                      ("eltwise", "py-aten", "embedding"), ("eltwise", "py-aten", "argmax"),
                      ("floor", "py-add", "add1"), ("floor", "py-mixed", "add1"), ("floor", "py-blocked", "add1"), ("floor", "py-view", "add1"), ("decode", "python", "module_call")]:
                self.assertIn(k, got)
                r = got[k]
                self.assertEqual(r["status"], "ok", r)
                self.assertGreater(float(r["median_ns"]), 0)
                self.assertLess(float(r["max_rel_err"] or 0), 1e-3, r)
                self.assertEqual((r["device"], r["dtype"], r["mode"]), ("cpu", "f32", "pipelined"))
            # no framework rows without transformers, and nothing written twice on a rerun
            self.assertNotIn(("decode", "transformers", "step"), got)
            again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            self.assertEqual(again.returncode, 0, again.stderr)
            self.assertEqual(len(rows_of(run / "results.csv")), len(rows))
            samples = rows_of(run / "samples.csv")
            self.assertEqual(len(samples), 3 * len(rows))

    def test_bad_input_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as t:
            out = subprocess.run([sys.executable, str(ROOT / "scripts" / "peer.py"), str(Path(t) / "none")],
                                 capture_output=True, text=True)
            self.assertEqual(out.returncode, 2)
            self.assertIn("not a run directory", out.stderr)
            run = Path(t) / "r"
            make_run(run)
            out = subprocess.run([sys.executable, str(ROOT / "scripts" / "peer.py"), str(run), "--batches", "0"],
                                 capture_output=True, text=True)
            self.assertEqual(out.returncode, 2)
            self.assertIn("--batches", out.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
