"""RefundDesk through the real engine (tests/support/refund_world.py): each test asserts what a
Slack user would see, the outbox rows the runs wrote and the parts a recording sender was
handed.
"""

from tests.support.refund_world import desk

__all__ = ["desk"]  # the fixture every module here uses
