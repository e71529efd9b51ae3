"""Records of runs outside the notebooks (`nmt_lib.run.records`): what `evaluate
--record`, `make bench` and `make soak` write, and what the book's pages are rendered
from."""

from nmt_lib.run.records import cpu_name


def test_a_run_records_where_each_stretch_of_it_computed(de_corpus, tmp_path):
    import torch

    from nmt_lib.run.checkpoint import load_checkpoint
    from nmt_lib.run.corpus import ParallelCorpus
    from nmt_lib.run.trainer import RunSettings, train_run
    from nmt_lib.transformer import Transformer, TransformerConfig

    corpus = ParallelCorpus(de_corpus, min_freq=1)
    model = lambda: Transformer(
        TransformerConfig(
            len(corpus.src_vocab),
            len(corpus.tgt_vocab),
            d_model=16,
            n_heads=2,
            d_ff=32,
            n_layers=1,
        )
    )
    settings = lambda steps: RunSettings(
        epochs=5, max_steps=steps, max_tokens=60, tokens_per_update=100, warmup=3
    )
    out, kw = (
        tmp_path / "run.pt",
        dict(report="none", save_kwargs={"data": corpus.settings}),
    )
    first = train_run(model(), corpus, settings(3), checkpoint=out, **kw)
    assert [(s["from_update"], s["to_update"]) for s in first["sessions"]] == [(0, 3)]
    assert (
        first["sessions"][0]["machine"]
        == f"{cpu_name()}, {torch.get_num_threads()} threads"
    )
    resume = load_checkpoint(out, device="cpu").payload
    again = train_run(model(), corpus, settings(5), checkpoint=out, resume=resume, **kw)
    assert [(s["from_update"], s["to_update"]) for s in again["sessions"]] == [
        (0, 3),
        (3, 5),
    ]
    resume = load_checkpoint(out, device="cpu").payload
    done = train_run(
        model(),
        corpus,
        settings(5),
        checkpoint=tmp_path / "done.pt",
        resume=resume,
        **kw,
    )
    # a stretch without updates is not entered
    assert done["sessions"] == again["sessions"]
