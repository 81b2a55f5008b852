"""Checkers for the book's exercises, one module per chapter: ``chNN`` grades chapter NN's.
Three chapters have a second module: ``ch02_class_token`` (the class token and position
table), ``ch08_resnet`` (the greyscale ResNet-18 baseline) and ``ch09_masking`` (MAE's random
masking). ``_common`` holds what the checkers share, their decorator and graders, and
``_predictions`` the grader of the "predict, then measure" exercises.

Each ``check_*`` function takes the learner's function (or predicted number), raises
:class:`AssertionError` with an explanation when it is wrong, naming the usual slip when it
recognises one, and prints a confirmation when it is right. Every one is importable from
here; ``__all__`` is built from the modules' own.
"""

from vit_tutorial.exercises.ch01 import *  # noqa: F403
from vit_tutorial.exercises.ch02 import *  # noqa: F403
from vit_tutorial.exercises.ch02_class_token import *  # noqa: F403
from vit_tutorial.exercises.ch03 import *  # noqa: F403
from vit_tutorial.exercises.ch04 import *  # noqa: F403
from vit_tutorial.exercises.ch05 import *  # noqa: F403
from vit_tutorial.exercises.ch06 import *  # noqa: F403
from vit_tutorial.exercises.ch07 import *  # noqa: F403
from vit_tutorial.exercises.ch08 import *  # noqa: F403
from vit_tutorial.exercises.ch08_resnet import *  # noqa: F403
from vit_tutorial.exercises.ch09 import *  # noqa: F403
from vit_tutorial.exercises.ch09_masking import *  # noqa: F403
from vit_tutorial.exercises.ch10 import *  # noqa: F403
from vit_tutorial.exercises.ch11 import *  # noqa: F403

__all__ = [name for name in dir() if name.startswith("check_")]
