"""Trains the long-context test model (issue 11) on the GPU machine and exports it for sparseserve.

  python3 tools/train_longctx_model.py --tokenizer tests/data/longctx_model/tokenizer.json \
      --out /tmp/longctx_model --minutes 8 --workers 14

A small Llama (GQA, RoPE, head_dim 64 so the CUDA fast paths run it) learns the RULER-style tasks
of tools/longctx at lengths mixed from 256 to 16K tokens: next-token loss on every token (the
filler stories teach it to write long text) plus the mean loss of the answer tokens (a 16K
prompt has a handful, which the plain mean would drown). Multi-key is mostly trained as a drill
that asks every key (tasks.multikey_drill); the run prints multi-key accuracy at 1K every minute.
The learning-rate schedule runs on wall time, so the run ends on time whatever the device's
speed. Lengths grow over the run (short contexts first: retrieval is learned there, then carried
to long ones).

At the end it scores held-out prompts by teacher forcing (a prompt's answer is right under
greedy decoding exactly when every answer token is the argmax given the right prefix), at the
training lengths and at 2x and 4x the longest one, and writes the Hugging Face checkpoint
(config.json, model.safetensors in bf16, tokenizer.json) plus train_log.json.
Needs torch and transformers; the data workers need only the standard library.
"""

import argparse
import collections
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from longctx import bpe, tasks  # noqa: E402

# Share of each kind of training sample; "filler" is plain stories (the long-generation task).
# Multi-key retrieval (the key decides which needle to copy) is learned last: it gets the most,
# mostly as the drill (tasks.multikey_drill: every key asked, so every needle's answer teaches key
# matching). Runs with 35% and 50% of the 4-needle task alone stayed at chance (25-37%) on it.
MIX = {"passkey": 0.06, "multikey": 0.1, "multikey_drill": 0.4, "multivalue": 0.1,
       "vartrack": 0.14, "cwe": 0.06, "filler": 0.14}
DRILL_PAIR_TOKENS = 40  # a drill needle plus its question and answer, rounded up
DRILL_MAX_NEEDLES = 16
# Lengths drawn in each phase: short first (retrieval is learned there, then carried to long
# contexts), then medium, then every length; --short-phase sets where the first ends.
SHORT, MEDIUM, ALL = [256, 512, 1024], [512, 1024, 2048, 4096], [1024, 2048, 4096, 8192, 16384]
MEDIUM_PHASE = 0.2  # fraction of the run between the short phase and all lengths
PAD_EXTRA = 64  # room for the target and EOS after a prompt of `length` tokens
TRAIN_SEED_BASE = 10_000_000  # training prompts never reuse an evaluation seed (< this)

_encoder = None
_mix = MIX  # the sample shares a run uses (main's --drill-share), set in each data worker
DEVICE = "cuda"  # "cpu" only for a smoke test of the script (main sets it)


def _init_worker(tokenizer_path, mix):
    global _encoder, _mix
    _encoder = bpe.ByteLevelBpe(tokenizer_path)
    _mix = mix


def mix_with_drill(share):
    """MIX with the drill at `share` and the other kinds scaled to keep their proportions."""
    others = 1 - MIX["multikey_drill"]
    return {kind: share if kind == "multikey_drill" else w * (1 - share) / others
            for kind, w in MIX.items()}


def make_batch(spec):
    """Worker: (length, batch, seed) -> (length, ids, answer mask, valid mask), numpy arrays of
    [batch, length + PAD_EXTRA] (padding here keeps the training loop's Python cheap)."""
    import numpy as np

    length, batch, seed = spec
    rng = random.Random(seed)
    width = length + PAD_EXTRA
    ids = np.zeros((batch, width), dtype=np.int64)
    ans = np.zeros((batch, width), dtype=bool)
    valid = np.zeros((batch, width), dtype=bool)
    for i in range(batch):
        kind = rng.choices(list(_mix), weights=list(_mix.values()))[0]
        if kind == "multikey_drill":
            most = min(DRILL_MAX_NEEDLES, (length - DRILL_PAIR_TOKENS) // DRILL_PAIR_TOKENS)
            drill = tasks.multikey_drill(length, seed * 1024 + i, _encoder, rng.randint(4, most))
            row = _encoder.encode(drill["prompt"], add_bos=True)
            for question, answer in drill["qa"]:
                row += _encoder.encode(question)
                first = len(row)
                row += _encoder.encode(answer)
                ans[i, first:len(row)] = True
            row.append(_encoder.eos_id)
            ans[i, len(row) - 1] = True
        else:
            task = tasks.make_task("longgen" if kind == "filler" else kind, length,
                                   seed * 1024 + i, _encoder)
            row = _encoder.encode(task["prompt"], add_bos=True)
            first = len(row)
            if task["target"]:
                row += _encoder.encode(task["target"]) + [_encoder.eos_id]
            ans[i, first:len(row)] = True
        ids[i, :len(row)] = row
        valid[i, :len(row)] = True
    return length, ids, ans, valid


def pad_ids(torch, rows):
    """Token rows right-padded with 0 into one [rows, longest] tensor (causal: padding at the end
    changes nothing before it)."""
    ids = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)
    for r, row in enumerate(rows):
        ids[r, :len(row)] = torch.tensor(row)
    return ids


def answer_spans(encoder, task, offset):
    """(first token, token count) of each answer inside the target, shifted by `offset`: the
    tokens whose text overlaps the answer's characters."""
    ends, pos = [], 0
    ids = encoder.encode(task["target"])
    for t in ids:
        pos += len(encoder.token_text(t))
        ends.append(pos)
    spans, search = [], 0
    for a in task["answers"]:
        begin = task["target"].index(a, search)
        end = begin + len(a)
        search = end
        first = next(i for i, e in enumerate(ends) if e > begin)
        last = next(i for i, e in enumerate(ends) if e >= end)
        spans.append((offset + first, last - first + 1))
    return spans


def losses(torch, model, ids, ans, valid):
    """(mean next-token loss over valid tokens, mean loss over answer tokens)."""
    with torch.autocast(DEVICE, dtype=torch.bfloat16):
        logits = model(input_ids=ids).logits
    logits = logits[:, :-1].float()
    labels = ids[:, 1:]
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                            labels.reshape(-1), reduction="none")
    nll = nll.view(labels.shape)
    lm_mask, ans_mask = valid[:, 1:], ans[:, 1:]
    lm = (nll * lm_mask).sum() / lm_mask.sum()
    answer = (nll * ans_mask).sum() / ans_mask.sum().clamp(min=1)
    return lm, answer


def lengths_at(fraction, short_phase):
    if fraction < short_phase:
        return SHORT
    return MEDIUM if fraction < short_phase + MEDIUM_PHASE else ALL


def evaluate(torch, model, encoder, lengths, per_cell, batch_tokens, names=tasks.TRAINED_TASKS):
    """Teacher-forced greedy accuracy per task and length on seeds 0..per_cell-1."""
    model.eval()
    table = {}
    for task in names:
        for length in lengths:
            items = [tasks.make_task(task, length, s, encoder) for s in range(per_cell)]
            correct, total = 0.0, 0
            step = max(1, batch_tokens // (length + PAD_EXTRA))
            for b in range(0, len(items), step):
                chunk = items[b:b + step]
                rows, spans = [], []
                for it in chunk:
                    prompt = encoder.encode(it["prompt"], add_bos=True)
                    target = encoder.encode(it["target"]) + [encoder.eos_id]
                    spans.append(answer_spans(encoder, it, len(prompt)))
                    rows.append(prompt + target)
                ids = pad_ids(torch, rows).to(DEVICE)
                with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16):
                    hidden = model.model(input_ids=ids).last_hidden_state
                for r, item_spans in enumerate(spans):
                    got = 0
                    for start, n in item_spans:
                        pos = torch.arange(start - 1, start - 1 + n, device=DEVICE)
                        with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16):
                            pred = model.lm_head(hidden[r, pos]).argmax(-1)
                        got += bool((pred == ids[r, start:start + n]).all())
                    correct += got / len(item_spans)
                    total += 1
            table[f"{task}/{length}"] = correct / total
            print(f"  eval {task:10s} {length:6d}: {100 * correct / total:5.1f}%", flush=True)
    model.train()
    return table


def main():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer", required=True, help="tokenizer.json (tools/longctx/train_tokenizer.py)")
    p.add_argument("--out", required=True, help="output directory for the checkpoint")
    p.add_argument("--minutes", type=float, default=8.0, help="training wall time (default 8)")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=768)
    p.add_argument("--rope-theta", type=float, default=100000.0)
    p.add_argument("--max-positions", type=int, default=65536,
                   help="config max_position_embeddings (trained up to 16K; more lets the "
                        "extrapolation be measured)")
    p.add_argument("--lr", type=float, default=1e-3,
                   help="peak learning rate (2e-3 learned no retrieval in 6 minutes on an H100)")
    p.add_argument("--batch-tokens", type=int, default=65536, help="tokens per optimizer step")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    p.add_argument("--eval-per-cell", type=int, default=30)
    p.add_argument("--eval-lengths", default="2048,16384")
    p.add_argument("--drill-share", type=float, default=MIX["multikey_drill"],
                   help="share of multi-key drill samples (the others keep their proportions)")
    p.add_argument("--short-phase", type=float, default=0.3,
                   help="fraction of the run at lengths 256-1024 only (default 0.3)")
    p.add_argument("--probe-seconds", type=float, default=60,
                   help="print multi-key accuracy at 1K (teacher-forced, 32 prompts) this often; "
                        "0 = never")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()

    global DEVICE
    if not 0 <= args.drill_share < 1:
        p.error("--drill-share must be in [0, 1)")
    mix = mix_with_drill(args.drill_share)
    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(args.seed)
    encoder = bpe.ByteLevelBpe(args.tokenizer)
    vocab = len(encoder.vocab)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=args.dim, intermediate_size=args.ffn,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.dim // args.heads,
        max_position_embeddings=args.max_positions, rope_theta=args.rope_theta,
        rms_norm_eps=1e-5, bos_token_id=encoder.bos_id, eos_token_id=encoder.eos_id,
        tie_word_embeddings=False, attn_implementation="sdpa")
    model = LlamaForCausalLM(config).to(DEVICE)
    params = sum(t.numel() for t in model.parameters())
    print(f"model: {params / 1e6:.2f}M parameters, {args.layers} layers, dim {args.dim}, "
          f"{args.heads}/{args.kv_heads} heads", flush=True)
    decay = [t for n, t in model.named_parameters() if t.dim() >= 2]
    no_decay = [t for n, t in model.named_parameters() if t.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), fused=DEVICE == "cuda")

    budget = args.minutes * 60
    log = {"args": vars(args), "params": params, "steps": []}
    rng = random.Random(args.seed)
    seed_counter = [TRAIN_SEED_BASE // 1024]

    def next_spec(start):
        fraction = min(1.0, (time.time() - start) / budget)
        length = rng.choice(lengths_at(fraction, args.short_phase))
        seed_counter[0] += 1
        return length, max(1, args.batch_tokens // length), seed_counter[0]

    ctx = mp.get_context("fork")
    with ctx.Pool(args.workers, initializer=_init_worker,
                  initargs=(args.tokenizer, mix)) as pool:
        start = time.time()
        step, last_print, last_probe = 0, start, start
        # A bounded queue of batches being made: the curriculum reads the clock when a batch is
        # asked for, so it must not run far ahead of training.
        pending = collections.deque(
            pool.apply_async(make_batch, (next_spec(start),)) for _ in range(2 * args.workers))
        while True:
            length, ids, ans, valid = pending.popleft().get()
            pending.append(pool.apply_async(make_batch, (next_spec(start),)))
            elapsed = time.time() - start
            if elapsed >= budget:
                break
            fraction = elapsed / budget
            warm = min(1.0, (step + 1) / 100)
            lr = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * fraction)))
            for g in opt.param_groups:
                g["lr"] = lr
            ids, ans, valid = (torch.from_numpy(x).to(DEVICE, non_blocking=True)
                               for x in (ids, ans, valid))
            lm, answer = losses(torch, model, ids, ans, valid)
            loss = lm + answer
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            if time.time() - last_print > 15 or step == 1:
                last_print = time.time()
                rec = {"step": step, "seconds": round(elapsed, 1), "length": length,
                       "lm": round(lm.item(), 4), "answer": round(answer.item(), 4),
                       "lr": lr}
                log["steps"].append(rec)
                print(f"step {step:5d} {elapsed:6.0f}s len {length:5d} lm {rec['lm']:.3f} "
                      f"answer {rec['answer']:.3f} lr {lr:.2e}", flush=True)
            if args.probe_seconds > 0 and time.time() - last_probe > args.probe_seconds:
                # Whether key matching has started (it comes late, after copying is learned).
                probe = evaluate(torch, model, encoder, [1024], 32, args.batch_tokens,
                                 names=["multikey"])
                log["steps"].append({"step": step, "seconds": round(elapsed, 1),
                                     "multikey_1k": probe["multikey/1024"]})
                last_probe = time.time()
        pool.terminate()
    log["train_seconds"] = round(time.time() - start, 1)
    log["train_steps"] = step
    print(f"trained {step} steps in {log['train_seconds']}s", flush=True)

    # The checkpoint is written before the evaluation, which a time limit may cut short.
    os.makedirs(args.out, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(args.out, safe_serialization=True)
    shutil.copy(args.tokenizer, os.path.join(args.out, "tokenizer.json"))
    lengths = [int(x) for x in args.eval_lengths.split(",") if x]
    log["eval_teacher_forced"] = evaluate(torch, model, encoder, lengths, args.eval_per_cell,
                                          args.batch_tokens * 2)
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    print(f"wrote {args.out} (model.safetensors {size / 2**20:.1f} MiB)", flush=True)


if __name__ == "__main__":
    main()
