#!/bin/bash
# Issue 19's ablation (the book's Results page: "What each change buys") at chapter 7's scale: the first 40,000 pairs of fra.txt (min_freq 3 for words), 2 + 2 layers,
# 4 epochs (about 370-450 updates of 2,000 target tokens, warm-up 100), one thread, one run at a time (beside the main run); greedy sacreBLEU on the distinct sentences of the validation split.
cd "$(dirname "$0")/.."   # the repository root; checkpoints and logs go to runs/
COMMON="--max-pairs 40000 --min-freq 3 --layers 2 --heads 4 --warmup 100 --threads 1 --checkpoint-every 0 --progress none"
run() {
  name=$1; epochs=$2; shift 2
  start=$(date +%s)
  .venv/bin/python -m nmt_lib train $COMMON --epochs $epochs "$@" --out runs/ab-$name.pt >> runs/ab-$name.log 2>&1
  end=$(date +%s)
  .venv/bin/python -m nmt_lib evaluate --checkpoint runs/ab-$name.pt --split valid --threads 1 \
    --record runs/ab-$name.json >> runs/ab-$name.log 2>&1
  echo "RESULT $name epochs=$epochs train_seconds=$((end - start)) $*" >> runs/ab-$name.log
}
mkdir -p runs && rm -f runs/ab-*
run words 4 --d-model 128 --d-ff 512 --tokenizer word
run bpe 4 --d-model 128 --d-ff 512 --tokenizer bpe --vocab-size 8000
run bpe-shared 4 --d-model 128 --d-ff 512 --tokenizer bpe --vocab-size 8000 --shared-vocab
run bpe-shared-tied 4 --d-model 128 --d-ff 512 --tokenizer bpe --vocab-size 8000 --shared-vocab --tie-embeddings
run wide 4 --d-model 192 --d-ff 768 --tokenizer bpe --vocab-size 8000 --shared-vocab --tie-embeddings
cp runs/ab-wide.log runs/ab-wide8.log; cp runs/ab-wide.pt runs/ab-wide8.pt
run wide8 8 --resume
echo all done > runs/ablate.done
