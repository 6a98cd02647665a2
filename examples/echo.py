"""The smallest agent: it answers every message with what the person said.

Run it: WAKEFUL_AGENT=examples.echo:factory wakeful serve  (from the folder holding examples/)
"""

from __future__ import annotations

from wakeful.agents import Agent, Message, Run, Setup, inert


class Echo(Agent):
    greeting = "Hi! I repeat what you say."

    def run(self, run: Run) -> None:
        for event in run.events:
            if isinstance(event, Message):
                # inert(): a person's text is shown as typed, never acted on (no @channel).
                run.reply(f"You said: {inert(event.text)}", to=event)


def factory(setup: Setup) -> Echo:
    return Echo()
