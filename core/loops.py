"""The three loops, under one name: worker (runs agents), scheduler (fires timers), dispatcher
(sends posts). Each lives in a module of its own; this one keeps the old import path."""

from wakeful.core.dispatcher import Dispatcher, Sender
from wakeful.core.scheduler import Scheduler
from wakeful.core.wakeups import Bell, Kicker, Loop, Wakeup
from wakeful.core.worker import Worker

__all__ = ["Bell", "Dispatcher", "Kicker", "Loop", "Scheduler", "Sender", "Wakeup", "Worker"]
