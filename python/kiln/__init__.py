"""Kiln's PyTorch front end (pure Python; docs/torch-frontend.md).

    import kiln
    spec = kiln.to_spec(model, (x,), name="mlp")    # torch.fx -> spec/1 (KilnUnsupported if not)
    spec.write("mlp.json")
    fast = kiln.compile(model, (x,))                # kiln optimize -> nvcc -> a callable
    y = fast(x)
    compiled = torch.compile(model, backend=kiln.backend)   # PyTorch 2.x: Kiln + Inductor

to_spec needs only PyTorch (1.13 or later); compile needs the kiln CLI for the optimize step (or a
cached / given .cu) and nvcc with a CUDA PyTorch for the build step.
"""
from .errors import KilnError, KilnUnsupported
from .frontend import to_spec
from .spec import Spec

__all__ = ["to_spec", "compile", "backend", "Spec", "KilnError", "KilnUnsupported"]


def compile(*args, **kwargs):  # noqa: A001 - the issue's name; documented in compiler.py
    """kiln.compile(module_or_fn, example_inputs, ...): see kiln.compiler.compile."""
    from .compiler import compile as _compile
    return _compile(*args, **kwargs)


def backend(gm, example_inputs, **kwargs):
    """The torch.compile backend: see kiln.backend_impl.backend."""
    from .dynamo import backend as _backend
    return _backend(gm, example_inputs, **kwargs)
