#!/usr/bin/env python3
"""Creates the tiny Hugging Face test checkpoints and tokenizers under tests/data/.

Run where `torch`, `transformers` and `tokenizers` are installed (e.g. the GPU machine; the
model runs on the CPU in float32, so the output does not depend on the GPU):

    python3 tools/make_tiny_hf.py --out tests/data

It writes, from text this script owns (CORPUS below) and fixed seeds:
  tiny_llama/   Llama with GQA, llama3 rope scaling, untied lm_head, SentencePiece-style BPE
                tokenizer.json (byte fallback, "▁" spaces), config.json, model.safetensors,
                golden.json
  tiny_qwen2/   Qwen2 with q/k/v biases, tied embeddings, byte-level BPE with Qwen2's pattern
  tokenizers/   gpt2_style.json and llama3_style.json (byte-level BPE with those patterns) and
                tokenizers_golden.json with the ids of TEST_STRINGS for every tokenizer
  tiny_mistral/     Mistral (Llama blocks) with a 64-token sliding window on every layer, the
                    tiny_llama tokenizer (rolling KV, issue 17)
  tiny_qwen2_swa/   Qwen2 with use_sliding_window: a 64-token window on layer 1 only
                    (max_window_layers = 1), the tiny_qwen2 tokenizer
golden.json holds, per prompt: the token ids, the top-5 logits at every prompt position, and
16 greedy continuation tokens (no EOS stop), computed by transformers in float32. The windowed
models' golden.json also has "long": a prompt several windows long with the top-5 logits at every
position and 200 greedy tokens after it (transformers' eager attention with its sliding-window
mask is the brute-force reference). `--models tiny_mistral,tiny_qwen2_swa` writes only those.
"""
import argparse
import json
import os
import random

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Text written for this project (no third-party data). Repeated with variations so that BPE
# learns a few hundred merges.
CORPUS_LINES = [
    "The router sends long prompts to prefill workers and short ones to decode workers.",
    "A decode worker streams tokens back while the next batch is being scheduled.",
    "Sparse attention keeps the sinks, the local window and a few vertical lines.",
    "Every block of sixty-four tokens has a hash that chains the previous block's hash.",
    "When the cache is full, requests wait in a bounded queue; they never crash the server.",
    "Tiny models are useful: they load in milliseconds and still exercise every kernel.",
    "It's the first token that costs the most, and it's the last one users remember.",
    "We've measured 1234 tokens per second, then 5678, then 90210 after the fix.",
    "Numbers like 3.14159, 2.71828 and 1.41421 appear in papers about attention.",
    "Le café est prêt ; déjà vu, naïve façade, über straße, señor niño.",
    "日本語のテキストも少しだけ含めます。東京と京都。",
    "Emoji appear in chats: 🙂 🚀 ✨ and they must survive a round trip.",
    "    Indented code:\n\tif (x > 0) { return y; }\n\n",
    "Questions? Answers! Lists: one, two, three; four - five / six.",
    "they're here, you'll see, I'm sure, he'd know, we'd go, she'll stay.",
]
TEST_STRINGS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  leading and   multiple   spaces\t\ttabs\nnewlines\n\n",
    "Numbers: 1234567 and 3.14159, 42!",
    "naïve café — déjà vu",
    "日本語のテキスト",
    "emoji 🙂🚀 mix",
    "it's they're we've I'm you'll he'd",
    "A decode worker streams tokens.",
    "unseen characters: 🦀 한국어 ∮ ⅞",
    "Hi</s>there<|endoftext|>end",
    "",
]
PROMPTS = [
    "The router sends long prompts",
    "Sparse attention keeps the sinks",
    "Emoji 🙂 and numbers 42",
    "unseen 🦀 한국어",
]


def corpus():
    rng = random.Random(1234)
    lines = []
    for _ in range(40):
        for line in CORPUS_LINES:
            words = line.split(" ")
            if rng.random() < 0.5:
                rng.shuffle(words)
            lines.append(" ".join(words))
    return lines


def spm_style_tokenizer(lines, vocab_size):
    """Llama-2-style: BPE over '▁'-joined text with byte fallback, <unk>/<s>/</s>, <0xXX>."""
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 259, special_tokens=["<unk>"],
                                  show_progress=False)
    trainer_tok.train_from_iterator(lines, trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                       special_tokens=[("<s>", 1)])
    return tok


def byte_level_tokenizer(lines, vocab_size, pattern, specials, bos=None, nfc=False):
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    if pattern == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def tokenizer_cases(tok):
    return [{"text": s, "ids": tok.encode(s).ids, "ids_no_special":
             tok.encode(s, add_special_tokens=False).ids} for s in TEST_STRINGS]


def golden(model, tok, eos_id):
    out = {"prompts": [], "tokenizer": tokenizer_cases(tok), "eos_token_id": eos_id}
    for text in PROMPTS:
        ids = tok.encode(text).ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
            top5 = [{"ids": row.topk(5).indices.tolist(), "logits": row.topk(5).values.tolist()}
                    for row in logits]
            seq = list(ids)
            for _ in range(16):  # plain greedy, no EOS stop
                nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
                seq.append(nxt)
        out["prompts"].append({"text": text, "ids": ids, "top5": top5,
                               "greedy": seq[len(ids):]})
    return out


def long_golden(model, tok, steps=200):
    """A prompt of about five 64-token windows and its greedy continuation, one forward pass per
    token over the whole sequence (no KV cache: nothing but the mask decides what is seen)."""
    text = " ".join(CORPUS_LINES[i % len(CORPUS_LINES)] for i in range(12))
    ids = tok.encode(text).ids[:300]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
        top5 = [{"ids": row.topk(5).indices.tolist(), "logits": row.topk(5).values.tolist()}
                for row in logits]
        seq = list(ids)
        for _ in range(steps):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
        # The window must matter: the same weights with full attention give other logits.
        window = model.config.sliding_window
        try:
            model.config.sliding_window = None
            full = model(torch.tensor([ids])).logits[0]
            print(f"{model.config.model_type}: window {window}, last-row logits differ from full "
                  f"attention by {float((full[-1] - logits[-1]).abs().max()):.4f}")
        except Exception as e:  # the check is informative only
            print(f"{model.config.model_type}: full-attention comparison skipped: {e}")
        finally:
            model.config.sliding_window = window
    return {"ids": ids, "top5": top5, "greedy": seq[len(ids):]}


def save(model, tok, dirname, eos_id, long=False):
    os.makedirs(dirname, exist_ok=True)
    model.save_pretrained(dirname, safe_serialization=True)
    tok.save(os.path.join(dirname, "tokenizer.json"))
    for extra in ("generation_config.json",):
        path = os.path.join(dirname, extra)
        if os.path.exists(path):
            os.remove(path)
    out = golden(model, tok, eos_id)
    if long:
        out["long"] = long_golden(model, tok)
    with open(os.path.join(dirname, "golden.json"), "w") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)


def main():
    import transformers
    from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                              Qwen2Config, Qwen2ForCausalLM)

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data")
    ap.add_argument("--models", default="all",
                    help="comma-separated subset of tiny_llama, tiny_qwen2, tokenizers, "
                         "tiny_mistral, tiny_qwen2_swa (default: all)")
    args = ap.parse_args()
    wanted = set(args.models.split(",")) if args.models != "all" else None

    def want(name):
        return wanted is None or name in wanted

    torch.manual_seed(0)
    lines = corpus()

    # Larger-than-default init so logits are peaked and greedy choices are not near-ties.
    llama_tok = spm_style_tokenizer(lines, 512)
    llama_cfg = LlamaConfig(
        vocab_size=llama_tok.get_vocab_size(), hidden_size=64, intermediate_size=160,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, initializer_range=0.3,
        torch_dtype="float32")
    llama = LlamaForCausalLM(llama_cfg).float().eval()
    if want("tiny_llama"):
        save(llama, llama_tok, os.path.join(args.out, "tiny_llama"), 2)

    qwen_tok = byte_level_tokenizer(lines, 400, QWEN2_PATTERN,
                                    ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], nfc=True)
    qwen_eos = qwen_tok.token_to_id("<|endoftext|>")
    qwen_cfg = Qwen2Config(
        vocab_size=qwen_tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
        max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1000000.0,
        tie_word_embeddings=True, bos_token_id=qwen_eos, eos_token_id=qwen_eos,
        initializer_range=0.3, torch_dtype="float32")
    qwen = Qwen2ForCausalLM(qwen_cfg).float().eval()
    with torch.no_grad():  # non-zero biases so the bias path is exercised
        for layer in qwen.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.3)
    if want("tiny_qwen2"):
        save(qwen, qwen_tok, os.path.join(args.out, "tiny_qwen2"), qwen_eos)

    # Sliding-window models (issue 17), seeded on their own so they do not disturb the others.
    if want("tiny_mistral"):
        torch.manual_seed(17)
        mistral_cfg = MistralConfig(
            vocab_size=llama_tok.get_vocab_size(), hidden_size=64, intermediate_size=160,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            max_position_embeddings=512, sliding_window=64, rms_norm_eps=1e-5,
            rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
            initializer_range=0.3, torch_dtype="float32", attn_implementation="eager")
        mistral = MistralForCausalLM(mistral_cfg).float().eval()
        save(mistral, llama_tok, os.path.join(args.out, "tiny_mistral"), 2, long=True)
    if want("tiny_qwen2_swa"):
        torch.manual_seed(18)
        swa_cfg = Qwen2Config(
            vocab_size=qwen_tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
            max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1000000.0,
            use_sliding_window=True, sliding_window=64, max_window_layers=1,
            tie_word_embeddings=True, bos_token_id=qwen_eos, eos_token_id=qwen_eos,
            initializer_range=0.3, torch_dtype="float32", attn_implementation="eager")
        swa = Qwen2ForCausalLM(swa_cfg).float().eval()
        save(swa, qwen_tok, os.path.join(args.out, "tiny_qwen2_swa"), qwen_eos, long=True)
    if not want("tokenizers"):
        print(f"wrote {args.models} with transformers {transformers.__version__}")
        return

    tok_dir = os.path.join(args.out, "tokenizers")
    os.makedirs(tok_dir, exist_ok=True)
    gpt2 = byte_level_tokenizer(lines, 360, "gpt2", ["<|endoftext|>"])
    llama3 = byte_level_tokenizer(lines, 380, LLAMA3_PATTERN,
                                  ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
                                  bos="<|begin_of_text|>")
    gpt2.save(os.path.join(tok_dir, "gpt2_style.json"))
    llama3.save(os.path.join(tok_dir, "llama3_style.json"))
    cases = {"gpt2_style.json": tokenizer_cases(gpt2),
             "llama3_style.json": tokenizer_cases(llama3),
             "../tiny_llama/tokenizer.json": tokenizer_cases(llama_tok),
             "../tiny_qwen2/tokenizer.json": tokenizer_cases(qwen_tok)}
    with open(os.path.join(tok_dir, "tokenizers_golden.json"), "w") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    print(f"wrote tiny checkpoints with transformers {transformers.__version__}, "
          f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
