"""Actors: supervised long-lived tasks with bounded inboxes. The work lives in the submodules."""

from actors.base import Actor
from actors.inbox import Inbox, Reply, ask
from actors.supervisor import ActorSnapshot, RestartPolicy, Supervisor

__all__ = ["Actor", "ActorSnapshot", "Inbox", "Reply", "RestartPolicy", "Supervisor", "ask"]
