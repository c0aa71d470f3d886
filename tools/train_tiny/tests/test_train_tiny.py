"""Tests of tools/train_tiny that run without a GPU.

    python3 -m unittest discover -s tools/train_tiny/tests -v

The pure parts (data, schedule, the checker's byte-level BPE) need only the standard
library; the comparison with the GPT-2 regex needs the `regex` module (Debian python3-regex);
the packing tests and the end-to-end smoke test need torch (Debian python3-torch, CPU) and
use stand-ins for transformers and tokenizers from fake_hf/ (so they test train.py's own
logic and files, not those libraries), and jinja2 (python3-jinja2) for the chat template.
Missing modules skip the tests that need them.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.dirname(HERE)
sys.path.insert(0, TOOL)

import check_outputs  # noqa: E402
import fortune_data  # noqa: E402
import schedule  # noqa: E402


def have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


FORTUNES = "/usr/share/games/fortunes"


class FortuneDataTest(unittest.TestCase):
    def test_clean_text_undoes_overstrike_and_drops_controls(self):
        self.assertEqual(fortune_data.clean_text("_\bb_\bo_\bl_\bd and B\bBo\bol\bld\bd"), "bold and Bold")
        self.assertEqual(fortune_data.clean_text("\n\nring\a the bell  \n\t-- me \n\n"), "ring the bell\n\t-- me")
        self.assertEqual(fortune_data.clean_text("\bx"), "x")

    def test_split_fortunes_on_percent_lines(self):
        text = "one\nline\n%\ntwo\n%\n%\nthree 100%\n%\n"
        self.assertEqual(fortune_data.split_fortunes(text), ["one\nline", "two", "", "three 100%", ""])

    def test_load_skips_dat_u8_hidden_and_dirs_and_drops_duplicates(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "b"), "w") as f:
                f.write("beta\n%\nalpha\n%\n")
            with open(os.path.join(d, "a"), "w") as f:
                f.write("alpha\n%\n  \n%\ngamma <|eos|> x\n%\ndelta")
            for name in ("a.dat", "a.u8", ".hidden"):
                with open(os.path.join(d, name), "w") as f:
                    f.write("junk\n%\n")
            os.mkdir(os.path.join(d, "off"))
            with open(os.path.join(d, "off", "c"), "w") as f:
                f.write("offensive\n%\n")
            self.assertEqual(fortune_data.load_fortunes(d), ["alpha", "delta", "beta"])

    def test_load_rejects_missing_or_empty_dir(self):
        with self.assertRaises(SystemExit) as e:
            fortune_data.load_fortunes("/nonexistent/fortunes")
        self.assertIn("/nonexistent/fortunes", str(e.exception))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "x.dat"), "w") as f:
                f.write("x")
            with self.assertRaises(SystemExit) as e:
                fortune_data.load_fortunes(d)
            self.assertIn("no fortune files", str(e.exception))

    def test_split_is_deterministic_and_about_three_percent(self):
        docs = [f"fortune {i}" for i in range(1000)]
        train, held = fortune_data.split_train_heldout(docs)
        self.assertEqual(len(held), 30)
        self.assertEqual(len(train), 970)
        self.assertEqual(set(train) | set(held), set(docs))
        self.assertFalse(set(train) & set(held))
        self.assertEqual((train, held), fortune_data.split_train_heldout(list(docs)))
        self.assertNotEqual(held, docs[:30])

    def test_fortune_file_round_trip(self):
        docs = ["a\nb", "100% sure", "\tindented\n\t\t-- someone"]
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "heldout.txt")
            fortune_data.write_fortune_file(path, docs)
            self.assertEqual(fortune_data.load_fortunes(d), docs)

    @unittest.skipUnless(os.path.isdir(FORTUNES), "fortunes package not installed")
    def test_real_corpus(self):
        docs = fortune_data.load_fortunes(FORTUNES)
        self.assertGreater(len(docs), 10000)
        self.assertFalse(any("\b" in d or "\a" in d for d in docs))
        train, held = fortune_data.split_train_heldout(docs)
        self.assertGreaterEqual(len(held), 64 + 50)


class ScheduleTest(unittest.TestCase):
    base = schedule.Trial("base", epochs=6, lr=2e-3, weight_decay=0.1)

    def result(self, trial, best_val, best_epoch=None, completed=True, spe=1.0, failed=False):
        return schedule.TrialResult(trial, best_val, trial.epochs if best_epoch is None else best_epoch,
                                    completed, trial.epochs * spe, spe, failed)

    def test_lr_warmup_peak_and_cosine_floor(self):
        lrs = [schedule.lr_at(s, 1000, 1e-3, 50) for s in range(1000)]
        self.assertAlmostEqual(lrs[0], 1e-3 / 50)
        self.assertAlmostEqual(lrs[49], 1e-3)
        self.assertAlmostEqual(lrs[50], 1e-3)
        self.assertAlmostEqual(lrs[-1], 0.05e-3)
        self.assertTrue(all(a >= b for a, b in zip(lrs[50:], lrs[51:])))
        with self.assertRaises(ValueError):
            schedule.lr_at(0, 0, 1e-3, 1)

    def test_warmup_bounds(self):
        self.assertEqual(schedule.warmup_steps(100), 10)
        self.assertEqual(schedule.warmup_steps(2000), 100)
        self.assertEqual(schedule.warmup_steps(100000), 200)
        self.assertEqual(schedule.warmup_steps(5), 5)

    def test_ladder_doubles_while_improving_late(self):
        t = schedule.plan_next([], self.base, 1000, 1.0)
        self.assertEqual((t.name, t.epochs, t.lr), ("epochs-6", 6, 2e-3))
        r1 = self.result(t, 3.0)
        t2 = schedule.plan_next([r1], self.base, 1000, 1.0)
        self.assertEqual(t2.epochs, 12)
        r2 = self.result(t2, 2.9, best_epoch=11.5)
        t3 = schedule.plan_next([r1, r2], self.base, 1000, 1.0)
        self.assertEqual(t3.epochs, 24)

    def test_ladder_stops_on_early_best_then_tries_lr_and_wd(self):
        t1 = schedule.Trial("epochs-6", 6, 2e-3, 0.1)
        t2 = schedule.Trial("epochs-12", 12, 2e-3, 0.1)
        results = [self.result(t1, 3.0), self.result(t2, 2.9, best_epoch=7.0)]
        nxt = schedule.plan_next(results, self.base, 1000, 1.0)
        self.assertEqual((nxt.name, nxt.epochs, nxt.lr), ("lr-half", 12, 1e-3))
        results.append(self.result(nxt, 2.85))
        nxt = schedule.plan_next(results, self.base, 1000, 1.0)
        self.assertEqual((nxt.name, nxt.epochs, nxt.lr), ("lr-double", 12, 4e-3))
        results.append(self.result(nxt, float("nan"), failed=True))
        nxt = schedule.plan_next(results, self.base, 1000, 1.0)
        self.assertEqual((nxt.name, nxt.lr, nxt.weight_decay), ("wd-x3", 1e-3, 0.1 * 3))
        results.append(self.result(nxt, 2.95))
        self.assertIsNone(schedule.plan_next(results, self.base, 1000, 1.0))

    def test_ladder_stops_without_gain(self):
        t1 = schedule.Trial("epochs-6", 6, 2e-3, 0.1)
        t2 = schedule.Trial("epochs-12", 12, 2e-3, 0.1)
        results = [self.result(t1, 3.0), self.result(t2, 2.999)]
        self.assertEqual(schedule.plan_next(results, self.base, 1000, 1.0).name, "lr-half")
        # the variants run at the better rung's length
        self.assertEqual(schedule.plan_next(results, self.base, 1000, 1.0).epochs, 12)

    def test_plans_fit_the_remaining_time(self):
        self.assertEqual(schedule.plan_next([], self.base, 4.0, 1.0).epochs, 3)
        self.assertEqual(schedule.plan_next([], self.base, 1.0, 1.0).epochs, 1)  # the first run always happens
        t1 = schedule.Trial("epochs-6", 6, 2e-3, 0.1)
        r1 = self.result(t1, 3.0)
        self.assertEqual(schedule.plan_next([r1], self.base, 10.0, 1.0).epochs, 9)   # shortened rung
        self.assertIsNone(schedule.plan_next([r1], self.base, 5.0, 1.0))             # nothing fits
        with self.assertRaises(ValueError):
            schedule.epochs_that_fit(10, 0)

    def test_cut_run_ends_the_ladder(self):
        t1 = schedule.Trial("epochs-6", 6, 2e-3, 0.1)
        r1 = self.result(t1, 3.0, best_epoch=4.0, completed=False)
        self.assertEqual(schedule.plan_next([r1], self.base, 100, 1.0).name, "lr-half")

    def test_all_failed_stops(self):
        t1 = schedule.Trial("epochs-6", 6, 2e-3, 0.1)
        r1 = self.result(t1, float("inf"), failed=True)
        self.assertIsNone(schedule.plan_next([r1], self.base, 100, 1.0))


class ModelCardTest(unittest.TestCase):
    def test_missing_value_is_an_error_naming_it(self):
        import fill_model_card

        with tempfile.TemporaryDirectory() as d:
            os.mkdir(os.path.join(d, "troupe-fortunes"))
            with open(os.path.join(d, "troupe-fortunes", "eval.json"), "w") as f:
                json.dump({"num_parameters": 5}, f)
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                self.assertEqual(fill_model_card.main([d]), 1)
            self.assertIn("eval.json has no", err.getvalue())
            self.assertFalse(os.path.exists(os.path.join(d, "troupe-fortunes", "README.md")))

    def test_template_placeholders_all_have_values(self):
        import re

        import fill_model_card

        with open(fill_model_card.DEFAULT_TEMPLATE) as f:
            names = set(re.findall(r"\{\{([A-Z_]+)\}\}", f.read()))
        ev = {"num_parameters": 1, "data": {"fortunes": 1, "heldout": 1, "train_stream_tokens": 1},
              "train_seconds": 1.0, "versions": {"torch": "x"}, "search": [], "best_run": {"name": "a", "epoch": 1.0},
              "train_tokens_seen": 1, "perplexity": 2.0, "total_predicted": 1,
              "samples": {"prompts": [{"prompt": "p", "continuations": ["c"]}]}}
        self.assertEqual(names, set(fill_model_card.values(ev)))


class ByteLevelBpeTest(unittest.TestCase):
    def tokenizer_json(self):
        table = check_outputs.byte_to_unicode()
        vocab = {t: i for i, t in enumerate(check_outputs.SPECIAL_TOKENS)}
        for b in range(256):
            vocab[table[b]] = len(vocab)
        merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("l", "l"), ("e", "ll")]
        for a, b in merges:
            vocab[a + b] = len(vocab)
        added = [{"id": i, "content": t, "special": True} for i, t in enumerate(check_outputs.SPECIAL_TOKENS)]
        return {"added_tokens": added, "model": {"type": "BPE", "vocab": vocab,
                                                  "merges": [list(m) for m in merges[:3]] + [" ".join(m) for m in merges[3:]]}}

    def test_byte_table_is_gpt2s(self):
        table = check_outputs.byte_to_unicode()
        self.assertEqual(len(set(table.values())), 256)
        self.assertEqual(table[ord(" ")], "Ġ")
        self.assertEqual(table[ord("\n")], "Ċ")
        self.assertEqual(table[ord("\t")], "ĉ")
        self.assertEqual(table[ord("A")], "A")
        self.assertEqual(table[0xAD], "Ń")

    def test_encode_applies_merges_by_rank_and_decodes(self):
        tj = self.tokenizer_json()
        bpe = check_outputs.ByteLevelBpe(tj)
        v = tj["model"]["vocab"]
        ids = bpe.encode("hello the\tthe", 0)
        # "hello": (h,e) has the lowest rank, then (l,l); (e,ll) never gets its chance.
        self.assertEqual(ids, [0, v["he"], v["ll"], v["o"], v["Ġthe"], v["ĉ"], v["t"], v["he"]])
        self.assertEqual(bpe.encode("yell", 0), [0, v["y"], v["ell"]])
        self.assertEqual(bpe.decode(ids, {0}), "hello the\tthe")
        self.assertEqual(bpe.decode(bpe.encode("héllo ✓", 0), {0}), "héllo ✓")

    def test_split_matches_hand_cases(self):
        self.assertEqual(check_outputs.gpt2_split("Hello  world's 42x!?\n\n  -- Me"),
                         ["Hello", " ", " world", "'s", " 42", "x", "!?", "\n\n ", " --", " Me"])
        self.assertEqual(check_outputs.gpt2_split("end  "), ["end", "  "])
        self.assertEqual(check_outputs.gpt2_split(""), [])

    @unittest.skipUnless(have("regex") and os.path.isdir(FORTUNES), "needs the regex module and fortunes")
    def test_split_matches_the_gpt2_regex_on_the_corpus(self):
        import regex

        pat = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
        docs = fortune_data.load_fortunes(FORTUNES)
        extra = ["  x", "a\u00a0 b", "é²³ ٣ 五", "'S 'll''d", "x\u3000 y", " \n"]
        bad = [d for d in docs + extra if pat.findall(d) != check_outputs.gpt2_split(d)]
        self.assertEqual(bad[:3], [])


@unittest.skipUnless(have("torch"), "needs torch")
class PackingTest(unittest.TestCase):
    def test_every_token_but_the_first_is_predicted_once(self):
        import torch
        import train

        flat = torch.arange(10, 10 + 600)
        inputs, targets = train.make_rows(flat, seq_len=256)
        self.assertEqual(tuple(inputs.shape), (3, 256))
        self.assertEqual(tuple(targets.shape), (3, 256))
        valid = targets[targets != train.IGNORE]
        self.assertEqual(valid.tolist(), list(range(11, 610)))
        self.assertTrue(torch.equal(inputs.reshape(-1)[:599], flat[:599]))
        self.assertEqual(int((targets == train.IGNORE).sum()), 3 * 256 - 599)

    def test_epoch_rows_are_a_seeded_permutation(self):
        import torch
        import train

        docs = [torch.tensor([train.BOS_ID, 10 + i, train.EOS_ID]) for i in range(50)]
        a = train.epoch_rows(docs, 7)
        b = train.epoch_rows(docs, 7)
        c = train.epoch_rows(docs, 8)
        self.assertTrue(torch.equal(a[0], b[0]))
        self.assertFalse(torch.equal(a[0], c[0]))
        self.assertEqual(sorted(t for t in a[0].reshape(-1).tolist() if t >= 10), list(range(10, 60)))

    def test_make_rows_rejects_a_short_stream(self):
        import torch
        import train

        with self.assertRaises(train.Fatal):
            train.make_rows(torch.tensor([1]))


def use_fake_hf() -> None:
    path = os.path.join(HERE, "fake_hf")
    if path not in sys.path:
        sys.path.insert(0, path)
    for name in ("transformers", "tokenizers"):
        mod = sys.modules.get(name)
        if mod is not None and not getattr(mod, "__file__", "").startswith(path):
            sys.modules.pop(name)


@unittest.skipUnless(have("torch"), "needs torch")
class GenerateTest(unittest.TestCase):
    def model(self):
        use_fake_hf()
        import torch
        import train
        import transformers

        torch.manual_seed(0)
        return transformers.LlamaForCausalLM(train.build_config()).eval()

    def test_manual_sampler_keeps_the_prompt_and_pads_after_eos(self):
        import torch
        import train

        model = self.model()
        x = torch.tensor([[train.BOS_ID, 40, 41, 42]])
        with torch.no_grad():
            model.model.embed_tokens.weight[train.EOS_ID] *= 0  # make EOS likely enough to appear
        torch.manual_seed(0)
        out = train.manual_generate(model, x, True, 12, 5, temperature=0.8, top_p=0.95)
        self.assertEqual(out.shape[0], 5)
        self.assertTrue(torch.equal(out[:, :4], x.repeat(5, 1)))
        for row in out.tolist():
            if train.EOS_ID in row[4:]:
                after = row[4:][row[4:].index(train.EOS_ID) + 1:]
                self.assertTrue(all(t == train.PAD_ID for t in after))

    def test_tiny_top_p_is_greedy(self):
        import torch
        import train

        model = self.model()
        x = torch.tensor([[train.BOS_ID, 50, 60]])
        greedy = train.manual_generate(model, x, False, 6, 1)
        nucleus = train.manual_generate(model, x, True, 6, 3, temperature=0.8, top_p=1e-9)
        self.assertTrue(torch.equal(nucleus, greedy.repeat(3, 1)))

    def test_generate_falls_back_when_transformers_fails(self):
        import torch
        import train

        model = self.model()

        def broken(**kwargs):
            raise TypeError("unexpected keyword argument")

        model.generate = broken
        x = torch.tensor([[train.BOS_ID, 70]])
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            out, sampler = train.generate(model, x, True, 5, 2)
        self.assertEqual(sampler, "manual (fallback)")
        self.assertEqual(out.shape[0], 2)
        self.assertIn("model.generate failed", log.getvalue())


@unittest.skipUnless(have("torch") and have("jinja2") and os.path.isdir(FORTUNES),
                     "needs torch, jinja2 and the fortunes package")
class SmokeTest(unittest.TestCase):
    """train.py end to end on the CPU with fake_hf's stand-ins, then check_outputs.py."""

    def test_train_then_check_then_eval_only(self):
        use_fake_hf()
        import train

        saved = {k: getattr(train, k) for k in ("PARAM_RANGE", "BATCH_ROWS", "EVAL_DOCS", "MIN_VALIDATION_DOCS")}
        saved_co = check_outputs.EVAL_DOCS
        os.environ["TRAIN_TINY_DEVICE"] = "cpu"
        try:
            train.PARAM_RANGE = (1, 10 ** 9)
            train.BATCH_ROWS = 8
            train.EVAL_DOCS = 8
            train.MIN_VALIDATION_DOCS = 20
            check_outputs.EVAL_DOCS = 8
            docs = [d for d in fortune_data.load_fortunes(FORTUNES) if len(d) < 160][:1200]
            with tempfile.TemporaryDirectory() as tmp:
                data = os.path.join(tmp, "data")
                out = os.path.join(tmp, "out")
                os.mkdir(data)
                fortune_data.write_fortune_file(os.path.join(data, "short"), docs)
                log = io.StringIO()
                with contextlib.redirect_stdout(log):
                    rc = train.main([data, out, "--seconds", "12", "--total-seconds", "600"])
                text = log.getvalue()
                self.assertEqual(rc, 0, text[-3000:])
                self.assertIn("rehearsal ok", text)
                self.assertIn("dry run ok", text)
                self.assertNotIn("warning", text.lower(), text[-3000:])
                mdir = os.path.join(out, "troupe-fortunes")
                self.assertFalse(os.path.exists(os.path.join(out, ".rehearsal")))

                with open(os.path.join(mdir, "eval.json")) as f:
                    ev = json.load(f)
                self.assertEqual(ev["hf_tokenizer_check"], "ok")
                self.assertEqual(len(ev["documents"]), 8)
                self.assertTrue(math.isfinite(ev["perplexity"]))
                self.assertLess(ev["reload_max_abs_logit_diff"], 1e-3)
                self.assertGreater(ev["train_tokens_seen"], 0)
                self.assertTrue(ev["search"] and ev["search"][0]["name"].startswith("epochs-"))
                self.assertNotIn("samples_error", ev)
                with open(os.path.join(mdir, "config.json")) as f:
                    cfg = json.load(f)
                self.assertEqual(cfg["rope_theta"], 10000.0)
                self.assertEqual(cfg["num_key_value_heads"], 4)

                # The reported NLL must match an independent float64 recomputation.
                import torch
                import transformers

                model = transformers.LlamaForCausalLM.from_pretrained(mdir, dtype=torch.float64,
                                                                      attn_implementation="eager")
                doc = ev["documents"][0]
                ids = torch.tensor([doc["token_ids"]])
                logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1)
                nll = -float(logp.gather(1, ids[0, 1:, None]).sum())
                self.assertAlmostEqual(nll, doc["nll_sum"], delta=1e-3 * max(1.0, nll))

                checker = check_outputs.Checker()
                with contextlib.redirect_stdout(io.StringIO()):
                    check_outputs.check_model_files(checker, mdir)
                    bpe = check_outputs.check_tokenizer_json(checker, mdir)
                    check_outputs.check_eval(checker, mdir, out, bpe, None)
                # The fake model is small and not shaped like Llama: only those checks may fail.
                # (and a few seconds of CPU training leave the perplexity far from a real model's).
                unexpected = [f for f in checker.failures
                              if not ("safetensors" in f or "checkpoint folder" in f or "plausible" in f)]
                self.assertEqual(unexpected, [])
                self.assertGreater(checker.passed, 40)

                # The model card fills from eval.json, every placeholder included.
                import fill_model_card

                with contextlib.redirect_stdout(io.StringIO()):
                    self.assertEqual(fill_model_card.main([out]), 0)
                with open(os.path.join(mdir, "README.md")) as f:
                    card = f.read()
                self.assertNotIn("{{", card)
                self.assertNotIn("TEMPLATE", card)
                self.assertIn(f"{ev['perplexity']:.2f}", card)
                self.assertIn("**Once upon a time**", card)
                self.assertIn("| epochs-", card)
                os.remove(os.path.join(mdir, "README.md"))

                before = ev["perplexity"]
                ev["perplexity"] = -1.0
                ev["documents"] = []
                with open(os.path.join(mdir, "eval.json"), "w") as f:
                    json.dump(ev, f)
                with contextlib.redirect_stdout(io.StringIO()):
                    rc = train.main([data, out, "--eval-only"])
                self.assertEqual(rc, 0)
                with open(os.path.join(mdir, "eval.json")) as f:
                    again = json.load(f)
                self.assertAlmostEqual(again["perplexity"], before, places=6)
                self.assertEqual(len(again["documents"]), 8)
                self.assertEqual(again["train_seconds"], ev["train_seconds"])
                self.assertEqual(again["search"], ev["search"])
                self.assertEqual(sorted(os.listdir(mdir)), sorted(check_outputs.EXPECTED_FILES))
                self.assertEqual(sorted(os.listdir(out)), ["heldout.txt", "troupe-fortunes"])
        finally:
            for k, v in saved.items():
                setattr(train, k, v)
            check_outputs.EVAL_DOCS = saved_co
            os.environ.pop("TRAIN_TINY_DEVICE", None)


if __name__ == "__main__":
    unittest.main()
