"""A local stand-in for Slack: a loopback Web API server plus a sender of signed events.

Tests, chaos runs and ``wakeful demo`` point a real ``slack_sdk.WebClient`` at
:class:`SlackEmulator`, so every call crosses real HTTP exactly as it would in production,
and drive the app with :class:`EventSender`, which signs requests the way Slack does.
Failures are scripted per call with :meth:`SlackEmulator.fault` rather than triggered by
magic values, so each test reads as the story it checks.
"""

from wakeful.devtools.emulator.cli import main
from wakeful.devtools.emulator.common import RESPONSE_URL_METHOD, Call
from wakeful.devtools.emulator.remote import RemoteEmulator
from wakeful.devtools.emulator.sender import EventSender, Reply
from wakeful.devtools.emulator.state import SlackEmulator

__all__ = [
    "RESPONSE_URL_METHOD",
    "Call",
    "EventSender",
    "RemoteEmulator",
    "Reply",
    "SlackEmulator",
    "main",
]
