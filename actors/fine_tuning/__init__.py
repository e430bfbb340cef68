"""Fine-tuning jobs followed at their providers: the job watcher (watcher.py) runs each job's
steps (steps.py) against the provider's OpenAI-compatible fine-tuning API (provider.py)."""

from actors.fine_tuning.steps import WatcherDeps
from actors.fine_tuning.watcher import FineTuningWatcher

__all__ = ["FineTuningWatcher", "WatcherDeps"]
