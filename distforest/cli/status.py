"""``distforest status``: is a run complete, still running, or interrupted?"""

from __future__ import annotations

from typing import Any


def format_state(state: dict[str, Any]) -> str:
    """``run_state`` as a few lines for people."""
    hint = {
        "complete": "",
        "running": f"  (being written by run {(state['lock'] or {}).get('run_id')}, "
        f"pid {(state['lock'] or {}).get('pid')} on {(state['lock'] or {}).get('host')})",
        "interrupted": "  (the run stopped before the end: run the same pipeline again to resume)",
    }[state["status"]]
    lines = [
        f"store:   {state['store']}",
        f"status:  {state['status']}{hint}",
        f"job:     {state['job']} (pipeline {state['pipeline']}, spec {state['spec_hash']}, "
        f"run {state['run_id']})",
        f"created: {state['created']}, updated {state['updated']}",
    ]
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in state["stages"].items() if v is not None)
    lines.append(f"stages:  {stages or 'none finished'}")
    for name, t in state["tiles"].items():
        lines.append(f"tiles:   {name}: {t['done']:,} of {t['total']:,} written")
    return "\n".join(lines)
