"""Greedy answers of transformers against sparseserve on the long-context test model (issue 11).

  python3 bench/longctx/hf_check.py --model tests/data/longctx_model --tasks tasks.jsonl \
      --results eval.json --num 20

Loads the same Hugging Face checkpoint with transformers (bf16, SDPA, on the GPU), generates
greedily for the first --num tasks of the file that `sparseserve eval --out eval.json` ran, and
prints how many outputs are identical text and how many score the same. Exit status 1 when fewer
than --min-agree of them score the same.
"""

import argparse
import json
import sys


def main():
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--tasks", required=True, help="the JSON-lines file given to sparseserve eval")
    p.add_argument("--results", required=True, help="sparseserve eval --out file")
    p.add_argument("--num", type=int, default=20)
    p.add_argument("--min-agree", type=float, default=0.9,
                   help="fraction of prompts whose scores must agree (default 0.9)")
    args = p.parse_args()

    tok = Tokenizer.from_file(f"{args.model}/tokenizer.json")
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16,
                                             attn_implementation="sdpa").cuda().eval()
    tasks = [json.loads(line) for line in open(args.tasks) if line.strip()][:args.num]
    ours = json.load(open(args.results))["items"][:len(tasks)]
    same_text = same_score = 0
    for task, mine in zip(tasks, ours):
        ids = torch.tensor([tok.encode(task["prompt"]).ids], device="cuda")
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=task["max_new_tokens"], do_sample=False,
                                 eos_token_id=model.config.eos_token_id, pad_token_id=0)
        text = tok.decode(out[0, ids.shape[1]:].tolist(), skip_special_tokens=True)
        score = (sum(a in text for a in task["answers"]) / len(task["answers"])
                 if task["answers"] else None)
        same_text += text == mine.get("output")
        same_score += score == mine.get("score")
        if text != mine.get("output"):
            print(f"differs: {task['task']}/{task['length']} seed {task['seed']}: "
                  f"transformers {text!r} sparseserve {mine.get('output')!r}")
    n = len(tasks)
    print(f"transformers vs sparseserve (dense, greedy): {same_text}/{n} identical outputs, "
          f"{same_score}/{n} identical scores")
    return 0 if same_score >= args.min_agree * n else 1


if __name__ == "__main__":
    sys.exit(main())
