"""Everything an agent author needs, in one import: `from wakeful.agents import ...`.

An agent is a factory `factory(setup: Setup) -> Agent`, named by WAKEFUL_AGENT
(`package.module:factory`). wakeful calls `agent.run(run)` with each batch of one inbox's typed
events; the agent answers through `run` (replies, approvals, durable steps, timers, saved
state), and wakeful writes what the run asked for in one fenced transaction, then posts it.
The guide is docs/agents.md; `wakeful.agents.testing` runs an agent without Slack.

Nothing here can post, finish, requeue or write to the store: what an agent does goes through
its run. The modules behind these names may change; these names are the contract.
"""

from wakeful.agents.base import Agent, Block
from wakeful.bot.slack.blocks import feedback_blocks, feedback_buttons, utc
from wakeful.bot.slack.blocks import when as slack_date
from wakeful.bot.slack.events import AssistantThreadStarted, Feedback, HomeOpened
from wakeful.bot.slack.home import HomeView, NextTimer, Pending, default_home, header, section
from wakeful.bot.slack.text import inert
from wakeful.core import tracing
from wakeful.core.effects import Timer
from wakeful.core.errors import (
    Interrupted,
    InvalidInput,
    LeaseLost,
    SessionUnusable,
    WakefulError,
)
from wakeful.core.events import (
    ApprovalAnswer,
    Command,
    Conversation,
    Event,
    Message,
    TimerTick,
    Unknown,
    WebhookDelivery,
)
from wakeful.core.gateway.client import Gateway, GatewayResponse
from wakeful.core.inbox_id import InboxId
from wakeful.core.memory import Memory, MemoryRefused
from wakeful.core.query import Query
from wakeful.core.records import ApprovalState, DeadLetters, StepRecord, StoredEvent, TimerState
from wakeful.core.run import Run
from wakeful.core.services import Tool
from wakeful.core.setup import AgentSettings, Setup, Zone
from wakeful.core.steps import Steps, step_key
from wakeful.core.streams import Stream
from wakeful.core.tool_failures import ToolFailed, ToolUnavailable
from wakeful.core.usage import ModelSpend, ModelUsage, OverBudget, SpendBudget

__all__ = [
    "Agent",
    "AgentSettings",
    "ApprovalAnswer",
    "ApprovalState",
    "AssistantThreadStarted",
    "Block",
    "Command",
    "Conversation",
    "DeadLetters",
    "Event",
    "Feedback",
    "Gateway",
    "GatewayResponse",
    "HomeOpened",
    "HomeView",
    "InboxId",
    "Interrupted",
    "InvalidInput",
    "LeaseLost",
    "Memory",
    "MemoryRefused",
    "Message",
    "ModelSpend",
    "ModelUsage",
    "NextTimer",
    "OverBudget",
    "Pending",
    "Query",
    "Run",
    "SessionUnusable",
    "Setup",
    "SpendBudget",
    "StepRecord",
    "Steps",
    "StoredEvent",
    "Stream",
    "Timer",
    "TimerState",
    "TimerTick",
    "Tool",
    "ToolFailed",
    "ToolUnavailable",
    "Unknown",
    "WakefulError",
    "WebhookDelivery",
    "Zone",
    "default_home",
    "feedback_blocks",
    "feedback_buttons",
    "header",
    "inert",
    "section",
    "slack_date",
    "step_key",
    "tracing",
    "utc",
]
