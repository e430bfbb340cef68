"""The Fine-tuning API (routes.py): creating a job (create.py: the checks, the training hold),
reading and cancelling it, and its events as a list or an SSE stream (events.py). The jobs
themselves are followed by the watcher actor (actors/fine_tuning/). docs/fine_tuning.md."""

from gateway.fine_tuning.deps import FineTuningDeps

__all__ = ["FineTuningDeps"]
