"""The plugins of this instance, built from the config (build.py): guardrails with their
classifiers (classifiers.py), the response cache, and what a block reports (reporting.py);
and the steps every inference route takes through them (flow.py). The plugin interface itself
is in services/plugins/ (docs/plugins.md)."""
