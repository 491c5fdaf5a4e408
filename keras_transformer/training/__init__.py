"""Training: corpus -> token store -> joint tokenizer -> batches -> `model.fit`.

`train(TrainOptions(...))` runs a whole job in a run directory, resumable
exactly (`job`). The same work is available as public steps that a notebook
calls around its own `model.fit`, in memory:

    options = TrainOptions(preset="tiny", max_steps=500)
    splits = load_splits(options)
    tokenizer = prepare_tokenizer(options, splits)
    data = prepare_batches(options, splits, tokenizer)
    model = build_model(options, model_config(options, tokenizer))
    model.fit(data.train.for_fit(DataPosition()),
              steps_per_epoch=len(data.train), epochs=3,
              validation_data=data.valid.for_fit())
    scores = evaluate_split(Translator(model, tokenizer), splits["test"])

or from a store: `store = prepare_training_store(options)`, then
`store_batches(options, store)` and `store.tokenizer()`.

- `options`: `TrainOptions`, every setting of `train` (the flags).
- `batches`: splits, the tokenizer, token-budget batches (the data steps).
- `store`: the token store a run reads, and the tokenizer it takes from it.
- `model_setup`: the model built and compiled (optimizer, schedule, loss).
- `job`: `train`, the whole job; `history`: its per-epoch history.
- `fine_tune`: `--init-from` a trained run or preset, LoRA on its projections.
- `callbacks`: the callbacks of `fit`, all counting optimizer updates.
- `distribution`, `accelerators`: data parallelism, and the devices seen.

Importing this package loads nothing heavy; each public name below loads its
module on first use.
"""

from __future__ import annotations

from keras_transformer.utils.lazy import lazy_exports

_EXPORTS = {
    "TrainOptions": ".options",
    "TrainingData": ".batches",
    "load_splits": ".batches",
    "prepare_batches": ".batches",
    "prepare_tokenizer": ".batches",
    "store_batches": ".batches",
    "prepare_training_store": ".store",
    "build_model": ".model_setup",
    "compile_model": ".model_setup",
    "model_config": ".model_setup",
    "TrainResult": ".job",
    "train": ".job",
    "TrainingDiverged": ".callbacks",
    "TrainingInterrupted": ".callbacks",
    "DistributionPlan": ".distribution",
    "setup_distribution": ".distribution",
    "DataPosition": "keras_transformer.data.pipeline",
    "RunBusy": "keras_transformer.run.directory",
    "RunWriteError": "keras_transformer.run.checkpoints",
    "StoreWriteError": "keras_transformer.data.token_store",
    "EXIT_INTERRUPTED": "keras_transformer.utils.console",
    "EXIT_WRITE_FAILED": "keras_transformer.utils.console",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
