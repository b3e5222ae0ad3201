"""Target tasks: specifications, loaders and GPT-1's task-aware input transformations."""

from .catalog import TASKS, get_task
from .loaders import load_task
from .spec import Example, SplitSpec, TaskSpec
from .transforms import TaskEncoder, best_span, best_spans, collate, input_format

__all__ = ["TASKS", "Example", "SplitSpec", "TaskEncoder", "TaskSpec", "best_span", "best_spans", "collate", "get_task",
           "input_format", "load_task"]
