"""How the bench suites write their tables: one cell format, and the machine in a caption or a closing line."""

from __future__ import annotations


def format_value(value: object, digits: int = 2, suffix: str = "", blank: str = "") -> str:
    """A table cell of the bench suites: ``blank`` for None, yes/NO for booleans, floats with ``digits`` and
    ``suffix`` (e.g. ``"x"``), anything else as ``str``."""
    if value is None:
        return blank
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return f"{value:.{digits}f}{suffix}" if isinstance(value, float) else str(value)


def describe_machine(machine: dict) -> str:
    """``"cpu (2 threads) on 2 CPUs (<the CPU's model name>), torch 2.13.0+cpu"``: the start of every caption of the
    generated tables in docs/benchmarks.md (files written before the bench recorded the CPU's model name give the
    architecture, e.g. x86_64)."""
    cpu = machine.get("cpu_model") or machine["processor"]
    return f"{machine['device']} on {machine['cpu_count']} CPUs ({cpu}), torch {machine['torch']}"


def machine_summary(machine: dict) -> str:
    """``"cpu (2 threads), 2 CPUs, torch 2.13.0+cpu (2 threads)"``: the bench suites' closing line starts so."""
    return (f"{machine['device']}, {machine['cpu_count']} CPUs, torch {machine['torch']} "
            f"({machine['torch_threads']} threads)")
