#!/usr/bin/env python3
"""Tests of `opbench peer` with scripts/peer.py as its worker, on the CPU: a whole op pass
into a run directory (without transformers, as on a machine that lacks it), the HF step,
generate() and a decoder layer, a Llama, an MoE model and bad input, read back by column.
Needs opbench built (target/release or target/debug, the newer)."""

import csv
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def opbench():
    name = "opbench.exe" if os.name == "nt" else "opbench"
    found = [p for p in (ROOT / "target" / "release" / name, ROOT / "target" / "debug" / name) if p.is_file()]
    if not found:
        raise unittest.SkipTest("opbench is not built")
    return str(max(found, key=lambda p: p.stat().st_mtime))


def peer(run, *args, python=sys.executable, env=None):
    """`opbench peer RUN ARGS` with `python` as the worker's."""
    return subprocess.run([opbench(), "peer", str(run), "--python", str(python), *args], capture_output=True,
                          text=True, env=dict(os.environ, **(env or {})))


def without_transformers(d: Path):
    """A Python that cannot import transformers (a wrapper script of this one; POSIX sh)."""
    if os.name == "nt":
        raise unittest.SkipTest("the wrapper is a POSIX shell script")
    w = d / "py-no-transformers"
    w.write_text(f"#!/bin/sh\nexec {sys.executable} -c \"import sys, runpy; sys.modules['transformers'] = None; "
                 "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')\" \"$@\"\n")
    w.chmod(0o755)
    return w


def rows_of(path: Path):
    with path.open() as f:
        return list(csv.DictReader(f))


def make_run(d: Path, **settings):
    """A run directory as the bench binaries start it: env.json only."""
    d.mkdir(parents=True)
    env = {"schema_version": 5, "run_id": "t", "started_at": "2026-12-01T00:00:00Z", "backend": "cpu",
           "devices": ["cpu"], "cpu_model": "test", "libtorch_version": "2.11.0",
           "settings": dict({"profile": "quick", "models": "qwen3-0.6b"}, **settings)}
    (d / "env.json").write_text(json.dumps(env))


class TimingCpu(unittest.TestCase):
    @unittest.skipUnless(sys.platform.startswith("linux"), "reads the thread's CPUs back on Linux")
    def test_a_sample_thread_goes_to_one_cpu_and_back(self):
        sys.path.insert(0, str(ROOT / "scripts"))
        spec = importlib.util.spec_from_file_location("peer", ROOT / "scripts" / "peer.py")
        peer_py = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(peer_py)
        home = os.sched_getaffinity(0)
        last = max(home)
        back = peer_py.on_cpu(last)
        self.assertEqual(os.sched_getaffinity(0), {last})
        back()
        self.assertEqual(os.sched_getaffinity(0), home)


class Handover(unittest.TestCase):
    def test_the_peer_hands_raw_samples_to_rust_and_reads_the_runs_budget(self):
        # the run's own budget (4 samples) rules where no argument is given; the rows are
        # made by ingest's estimator, their median the median of the per-call times sampled
        with tempfile.TemporaryDirectory() as t:
            run = Path(t) / "r"
            make_run(run, samples="4", measure_ms="20", warmup_ms="5")
            out = peer(run, "--only", "ops", "--batches", "1", "--ctx", "16", "--device", "cpu",
                       python=without_transformers(Path(t)))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("ingested", out.stderr)
            per_call = {}
            for r in rows_of(run / "peer.csv"):
                key = (r["op"], r["variant"], r["site"])
                per_call.setdefault(key, []).append(float(r["total_ns"]) / int(r["iters"]))
            rows = {(r["op"], r["variant"], r["site"]): r for r in rows_of(run / "results.csv")}
            self.assertEqual(set(per_call), set(rows))
            for key, times in per_call.items():
                self.assertEqual(len(times), 4, key)
                self.assertEqual(rows[key]["samples"], "4", key)
                self.assertAlmostEqual(float(rows[key]["median_ns"]), statistics.median(times), delta=0.05)
                self.assertIn(rows[key]["status"], ("ok",), rows[key])
            # the torch control before and after every sample reaches samples.csv
            for r in rows_of(run / "samples.csv"):
                self.assertTrue(float(r["control_ns"]) > 0 and float(r["control_after_ns"]) > 0, r)
            # Rust counted the FLOPs and bytes of the model's sites
            self.assertGreater(int(rows[("linear", "py-aten", "q_proj")]["flops"]), 0)

    def test_the_worker_answers_a_bad_request_and_goes_on(self):
        worker = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "peer.py"), "--opbench-worker", "--model",
                                   "qwen3-0.6b", "--batches", "1", "--ctx", "16", "--device", "cpu", "--only", "ops",
                                   "--stretches", "32", "--control-span-ns", "200000", "--control-chunk", "16",
                                   "--beside-layers", "8", "--state-keys",
                                   "cpu_ns,nivcsw,steal,host_after_ns,slowest_ns,control_after_ns,typical_ns"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        out, _ = worker.communicate('not json\n{"req":"prepare","key":"no/such/case"}\n{"req":"frobnicate"}\n'
                                    '{"req":"hello"}\n{"req":"quit"}\n', timeout=300)
        replies = [json.loads(x) for x in out.splitlines() if x.startswith('{"reply"')]
        self.assertEqual([r["reply"] for r in replies], ["error", "error", "error", "hello", "bye"])
        self.assertIn("malformed request", replies[0]["message"])
        self.assertIn("unknown case", replies[1]["message"])
        self.assertEqual(replies[3]["protocol"], 1)


    def test_two_pythons_are_compared_in_pairs_by_opbench_ab(self):
        # the same worker on both sides of `opbench ab` (an A/A): each side's run directory
        # holds the Python rows, and the verdict finds no regression. What is tested is the
        # handover, not the statistics (crates/duet/tests/paired.rs): at ±3% one of ~15 such
        # 20-s A/A runs on the 2-core VM called a case `slower` (CI, 2026-12-05), so ±20%.
        # The filter is matched against the key as opbench writes it (`b1/q1`), as the bench
        # workers match theirs
        with tempfile.TemporaryDirectory() as t:
            py = without_transformers(Path(t))
            out = subprocess.run([opbench(), "ab", "--base-python", str(py), "--cand-python", str(py),
                                  "--filter", "^floor/py-(add|view)/add1/none/decode/b1/q1/", "--budget", "20", "--out", t, "--run", "aa",
                                  "--tolerance", "20", "--family-tolerance", "20"],
                                 capture_output=True, text=True,
                                 env=dict(os.environ, OPBENCH_PROFILE="quick", OPBENCH_DEVICE="cpu"))
            self.assertEqual(out.returncode, 0, out.stdout[-3000:] + out.stderr[-2000:])
            self.assertIn("no regression found", out.stdout)
            for side in ("base", "cand"):
                rows = rows_of(Path(t) / "runs" / f"aa-{side}" / "results.csv")
                self.assertEqual({r["variant"] for r in rows}, {"py-add", "py-view"}, side)
                self.assertTrue(all(r["status"] == "ok" and int(r["samples"]) >= 16 for r in rows), rows)


class OpPass(unittest.TestCase):
    def test_python_op_rows_without_transformers(self):
        with tempfile.TemporaryDirectory() as t:
            run = Path(t) / "r"
            make_run(run)
            args = ["--only", "ops", "--batches", "1", "--ctx", "16", "--device", "cpu", "--samples", "3",
                    "--measure-ms", "20", "--warmup-ms", "5"]
            py = without_transformers(Path(t))
            out = peer(run, *args, python=py)
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
            again = peer(run, *args, python=py)
            self.assertEqual(again.returncode, 0, again.stderr)
            self.assertEqual(len(rows_of(run / "results.csv")), len(rows))
            samples = rows_of(run / "samples.csv")
            self.assertEqual(len(samples), 3 * len(rows))
            # a sample of 4 calls or more carries its slowest stretch of calls, per call: no
            # faster than the sample's own mean, within its whole time (a 45-ms lm_head on a
            # CPU is one call a sample: none); a short call's samples always have it
            for r in samples:
                if r["variant"].startswith("py-") and r["slowest_ns"]:
                    per_call, slowest = float(r["total_ns"]) / int(r["iters"]), float(r["slowest_ns"])
                    self.assertTrue(0.99 * per_call <= slowest <= float(r["total_ns"]), r)
                    # and its median stretch, the calls' own pace: no slower than the slowest
                    self.assertTrue(0 < float(r["typical_ns"]) <= slowest, r)
                self.assertEqual(r["slowest_ns"] == "", r["typical_ns"] == "", r)
                if (r["op"], r["site"]) == ("eltwise", "residual_add"):
                    self.assertNotEqual(r["slowest_ns"], "", r)

    @unittest.skipIf(importlib.util.find_spec("transformers") is None, "transformers is not importable")
    def test_the_hf_step_and_its_decoder_layers_five_ways(self):
        # a four-layer Qwen3 of the real structure, small enough for the CPU in seconds
        with tempfile.TemporaryDirectory() as t:
            shapes = Path(t) / "shapes"
            shapes.mkdir()
            (shapes / "grid.toml").write_text((ROOT / "shapes" / "grid.toml").read_text())
            (shapes / "qwen3-tiny.toml").write_text(
                'name = "qwen3-tiny"\nsource = "test"\nhidden_size = 64\nintermediate_size = 128\n'
                "num_hidden_layers = 4\nnum_attention_heads = 4\nnum_key_value_heads = 2\nhead_dim = 32\n"
                "vocab_size = 512\nrope_theta = 1000000.0\nrms_norm_eps = 1e-6\n"
                "max_position_embeddings = 4096\ntie_word_embeddings = true\n")
            run = Path(t) / "r"
            make_run(run)
            env = json.loads((run / "env.json").read_text())
            env["settings"]["models"] = "qwen3-tiny"
            (run / "env.json").write_text(json.dumps(env))
            out = subprocess.run([opbench(), "peer", str(run), "--python", sys.executable, "--batches", "1",
                                  "--ctx", "16", "--device", "cpu", "--samples", "3", "--measure-ms", "20",
                                  "--warmup-ms", "5"], capture_output=True, text=True,
                                 env=dict(os.environ, OPBENCH_SHAPES=str(shapes)))
            self.assertEqual(out.returncode, 0, out.stderr)
            got = {r["site"]: r for r in rows_of(run / "results.csv") if r["variant"] == "transformers"}
            layer_sites = ["layer", "layer_flat", "layer_calls", "stack", "stack_flat"]
            generate_sites = ["step", "step_synced", "step_as_generate", "generate_from_l", "generate_loop"]
            static_sites = ["cache_update_static", "mask_static", "sdpa_static", "step_static",
                            "generate_static_from_l"]
            for site in ["layers1", "layers4", "generate", "generate_static", "mask", "module_call",
                         "cache_update"] + layer_sites + generate_sites + static_sites:
                self.assertIn(site, got)
                self.assertEqual(got[site]["status"], "ok", got[site])
            # the static cache: its attention checked against float64 over the L + 1 filled
            # slots (the mask hides the rest), its step and generate() against the dynamic step
            self.assertLess(float(got["sdpa_static"]["max_rel_err"]), 1e-4, got["sdpa_static"])
            self.assertIn("returned (1, 1, 1, 32)", got["mask_static"]["note"])
            for site in ["step_static", "generate_static_from_l"]:
                self.assertLess(float(got[site]["max_rel_err"]), 1e-4, got[site])
                # sampled in the step's own rounds: one sample a round, as the step's
                self.assertEqual((got[site]["kv_len"], got[site]["samples"]), ("17", "8"), got[site])
            # generate() taken apart: the five sites in the same rounds, at the step's shape;
            # generate() from the cache checked against the step (its first token's logits),
            # its loop (the forward stubbed) not checked, and a fraction of a token
            for site in generate_sites:
                self.assertEqual((got[site]["kv_len"], got[site]["samples"]), ("17", "8"), got[site])
            self.assertLess(float(got["generate_from_l"]["max_rel_err"]), 1e-4)
            self.assertEqual(got["generate_loop"]["max_rel_err"], "")
            self.assertIn("stand-in returning fixed logits", got["generate_loop"]["note"])
            self.assertLess(float(got["generate_loop"]["median_ns"]), float(got["generate_from_l"]["median_ns"]))
            self.check_sample_states(run)
            # graphs need a GPU: a row that says so, with torch.compile or without
            for site in ["generate_graph", "sdpa_static_graph", "step_cudagraph", "generate_cudagraph_from_l"]:
                self.assertEqual(got[site]["status"], "unsupported", got[site])
                self.assertIn("need a GPU", got[site]["note"])
            self.assertNotIn("layer_own", got)
            for site in layer_sites:
                r = got[site]
                # twice the samples: predict reads differences of these rows
                self.assertEqual((r["batch"], r["kv_len"], r["samples"]), ("1", "17", "6"))
                self.assertLess(float(r["max_rel_err"]), 1e-4, r)
            # the stacks are the model's four layers in turn, written per layer: about one
            # layer's time, not four
            self.assertIn("the model's 4 Qwen3DecoderLayers called in turn", got["stack"]["note"])
            for site in ["stack", "stack_flat"]:
                ratio = float(got[site]["median_ns"]) / float(got["layer"]["median_ns"])
                self.assertTrue(0.25 < ratio < 3.0, (site, ratio))
            # a layer's calls each alone cost something, and so does the layer called whole
            self.assertGreater(float(got["layer_calls"]["median_ns"]), 0)
            self.assertGreater(float(got["layer"]["median_ns"]), float(got["module_call"]["median_ns"]))
            # the layer beside the step: one sample before each step sample of the rounds
            # (the warm-up round's dropped), 8 layers a sample, checked, about the layer's
            # calls flat
            r = got["layer_beside"]
            self.assertEqual((r["status"], r["kv_len"], r["samples"]), ("ok", "17", "8"), r)
            self.assertLess(float(r["max_rel_err"]), 1e-4, r)
            ratio = float(r["median_ns"]) / float(got["layer_flat"]["median_ns"])
            self.assertTrue(0.33 < ratio < 3.0, ratio)
            beside = [x for x in rows_of(run / "samples.csv") if x["site"] == "layer_beside"]
            self.assertEqual({x["iters"] for x in beside}, {"8"})

    def check_sample_states(self, run):
        """Every timed sample of the peer's run carries the host's state."""
        # every timed sample carries the host's state: the Python control before and
        # after it and the process's CPU time (a sum of samples, layer_calls, the first's
        # control before and the last's after, and no slowest stretch); cache_update's
        # samples are differences of two timings and carry none
        states = [r for r in rows_of(run / "samples.csv") if r["variant"] == "transformers"]
        self.assertTrue(states)
        for r in states:
            if r["site"] == "cache_update":
                self.assertEqual((r["host_ns"], r["cpu_ns"], r["slowest_ns"], r["control_ns"]),
                                 ("", "", "", ""), r)
                continue
            self.assertTrue(float(r["host_ns"]) > 0 and float(r["host_after_ns"]) > 0, r)
            # and the torch control (Python's one-element add over ~200 µs) before and after
            # (a sample's may catch the host in a stall: their median is an add's time)
            self.assertTrue(float(r["control_ns"]) > 0 and float(r["control_after_ns"]) > 0, r)
            self.assertNotEqual(r["cpu_ns"], "", r)
            self.assertEqual(r["sm_mhz"], "", r)
            if r["site"] in ("layer_calls", "generate_loop"):
                self.assertEqual((r["slowest_ns"], r["typical_ns"]), ("", ""), r)
            # generate() is timed per token (the clock read as each forward starts): its
            # slowest and median token, each within the call (8 tokens on the CPU)
            if r["site"] == "generate_from_l":
                slowest, typical = float(r["slowest_ns"]), float(r["typical_ns"])
                self.assertTrue(0 < typical <= slowest <= float(r["total_ns"]), r)
        controls = [float(r[k]) for r in states if r["control_ns"] for k in ("control_ns", "control_after_ns")]
        self.assertLess(statistics.median(controls), 200_000)

    @unittest.skipIf(importlib.util.find_spec("transformers") is None, "transformers is not importable")
    def test_a_llama_is_built_from_its_family_without_qk_norm(self):
        # the model file's family picks transformers' class (AutoModelForCausalLM.from_config):
        # a two-layer Llama, checked against float64, whose layer written out flat has no
        # q/k norms (24 calls, not Qwen3's 26) and whose norm rows have no q_norm or k_norm
        with tempfile.TemporaryDirectory() as t:
            shapes = Path(t) / "shapes"
            shapes.mkdir()
            (shapes / "grid.toml").write_text((ROOT / "shapes" / "grid.toml").read_text())
            (shapes / "llama-tiny.toml").write_text(
                'name = "llama-tiny"\nsource = "test"\nfamily = "llama"\nhidden_size = 64\n'
                "intermediate_size = 128\nnum_hidden_layers = 2\nnum_attention_heads = 4\n"
                "num_key_value_heads = 2\nhead_dim = 16\nvocab_size = 512\nrope_theta = 500000.0\n"
                "rms_norm_eps = 1e-5\nmax_position_embeddings = 4096\ntie_word_embeddings = true\n")
            run = Path(t) / "r"
            make_run(run, models="llama-tiny", samples="3", measure_ms="20", warmup_ms="5")
            out = subprocess.run([opbench(), "peer", str(run), "--python", sys.executable, "--batches", "1",
                                  "--ctx", "16", "--device", "cpu", "--no-user-generate"], capture_output=True,
                                 text=True, env=dict(os.environ, OPBENCH_SHAPES=str(shapes)))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("(llama)", out.stderr)
            rows = rows_of(run / "results.csv")
            got = {r["site"]: r for r in rows if r["variant"] == "transformers"}
            for site in ["step", "layer", "layer_flat", "stack", "stack_flat"]:
                self.assertEqual(got[site]["status"], "ok", got[site])
                self.assertLess(float(got[site]["max_rel_err"]), 1e-4, got[site])
            self.assertIn("LlamaDecoderLayer", got["stack"]["note"])
            self.assertIn("24 calls", got["layer_flat"]["note"])
            norms = {r["site"] for r in rows if (r["op"], r["variant"]) == ("rmsnorm", "py-hf")}
            self.assertEqual(norms, {"input_norm", "post_norm", "final_norm"})

    def test_bad_input_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as t:
            out = subprocess.run([opbench(), "peer", str(Path(t) / "none")],
                                 capture_output=True, text=True)
            self.assertEqual(out.returncode, 2)
            self.assertIn("not a run directory", out.stderr)
            run = Path(t) / "r"
            make_run(run)
            out = subprocess.run([opbench(), "peer", str(run), "--python", sys.executable, "--batches", "0"],
                                 capture_output=True, text=True)
            self.assertEqual(out.returncode, 2)
            self.assertIn("--batches", out.stderr)

    @unittest.skipIf(importlib.util.find_spec("transformers") is None, "transformers is not importable")
    def test_an_moe_model_gets_its_hf_step_both_ways_checked_through_two_layers(self):
        # a tiny Qwen3-MoE (16 experts, 4 per token, 3 layers) from its own shapes folder:
        # transformers' default experts implementation and its eager loop, each a row
        # checked against float64, and no op, layer or generate() rows
        tiny = """name = "tiny-moe"
source = "test"
hidden_size = 128
intermediate_size = 256
moe_intermediate_size = 64
num_experts = 16
num_experts_per_tok = 4
num_hidden_layers = 3
num_attention_heads = 4
num_key_value_heads = 2
head_dim = 32
vocab_size = 300
rope_theta = 1000000.0
rms_norm_eps = 1e-6
max_position_embeddings = 4096
tie_word_embeddings = false
"""
        with tempfile.TemporaryDirectory() as t:
            shapes = Path(t) / "shapes"
            shapes.mkdir()
            (shapes / "grid.toml").write_text((ROOT / "shapes" / "grid.toml").read_text())
            (shapes / "tiny-moe.toml").write_text(tiny)
            run = Path(t) / "r"
            make_run(run, models="tiny-moe", samples="4", measure_ms="20", warmup_ms="5")
            out = subprocess.run([opbench(), "peer", str(run), "--python", sys.executable, "--batches", "1,4",
                                  "--ctx", "32", "--device", "cpu"], capture_output=True, text=True,
                                 env=dict(os.environ, OPBENCH_SHAPES=str(shapes)))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("mixture-of-experts", out.stderr)
            got = [r for r in rows_of(run / "results.csv") if r["variant"] == "transformers"]
            self.assertEqual(sorted((r["site"], r["batch"]) for r in got),
                             [("step", "1"), ("step", "4"), ("step_experts_eager", "1"), ("step_experts_eager", "4")])
            for r in got:
                self.assertEqual(r["status"], "ok", r)
                self.assertLess(float(r["max_rel_err"]), 1e-4)
                self.assertIn("first 2 layers", r["note"])
            self.assertIn("experts implementation `eager`",
                          next(r["note"] for r in got if r["site"] == "step_experts_eager"))
            self.assertFalse([r for r in rows_of(run / "results.csv") if r["variant"].startswith("py-")
                              and r["op"] != "floor"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
