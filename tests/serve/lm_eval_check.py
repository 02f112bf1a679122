"""lm-evaluation-harness against a live tf serve: python3 lm_eval_check.py BASE_URL.

Runs a tiny local multiple-choice task (fixtures/eval/tiny_mc.jsonl; no hub download) through
lm-eval's `local-completions` model with tf's own tokenizer endpoints (`tokenizer_backend=remote`,
token-id prompts), twice, and checks that both runs give the same accuracy and the same
log-likelihood for every choice of every item, bit for bit. Prints "ok" and exits 0 on success.
"""

import os
import pathlib
import sys
import tempfile

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "eval" / "tiny_mc.jsonl"

TASK = """task: tf_tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(base, tasks_dir):
    out = simple_evaluate(
        model="local-completions",
        model_args=(f"base_url={base}/v1/completions,model=tf,tokenizer_backend=remote,"
                    "tokenized_requests=True,num_concurrent=2,max_retries=1"),
        tasks=["tf_tiny_mc"],
        task_manager=TaskManager(include_path=tasks_dir),
        log_samples=True,
        random_seed=0,
    )
    acc = out["results"]["tf_tiny_mc"]["acc,none"]
    resps = [s["resps"] for s in sorted(out["samples"]["tf_tiny_mc"], key=lambda s: s["doc_id"])]
    return acc, resps


def main():
    base = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        pathlib.Path(d, "tf_tiny_mc.yaml").write_text(TASK.format(data=DATA))
        first = run(base, d)
        second = run(base, d)
    print("acc:", first[0], "items:", len(first[1]))
    if len(first[1]) != 6:
        fail(f"{len(first[1])} items scored, not 6")
    if first != second:
        fail(f"two runs differ:\n{first}\n{second}")
    print("ok")


if __name__ == "__main__":
    main()
