"""Fine-tuning without I/O: the API's wire types (api.py), the rules a job is created by
(rules.py: base model names, suffixes, effective hyperparameters, the fine-tuned model's name,
the training charge), the dataset check run before anything is sent to a provider (dataset.py)
and the mapping of a provider's job to the API's states (provider.py). docs/fine_tuning.md."""
