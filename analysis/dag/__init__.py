"""The schedule as a DAG (networkx, loaded on first use), trace validation, and the red-blue
pebble game on the DAG of a small schedule."""

from flashio.analysis.dag.trace_check import Problem, validate_trace

__all__ = ["DagStats", "KernelDagStats", "Problem", "dag_stats", "schedule_dag", "validate_trace"]


def __getattr__(name: str):
    if name in ("DagStats", "KernelDagStats", "dag_stats", "schedule_dag"):
        from flashio.analysis.dag import graph

        return getattr(graph, name)
    raise AttributeError(f"module 'flashio.analysis.dag' has no attribute {name!r}")
