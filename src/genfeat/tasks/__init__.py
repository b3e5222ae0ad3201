"""Target tasks: specifications, loaders and GPT-1's task-aware input transformations."""

from .catalog import TASKS, get_task
from .loaders import load_task
from .spec import Example, SplitSpec, TaskSpec

__all__ = ["TASKS", "Example", "SplitSpec", "TaskSpec", "get_task", "load_task"]
