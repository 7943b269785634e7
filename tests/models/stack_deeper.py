"""``stack.py`` with a third layer: a changed model whose repeated layer is unchanged."""

from stack import build_model as _build, example_inputs  # noqa: F401  (the model file's neighbour)


def build_model():
    return _build(layers=3)
