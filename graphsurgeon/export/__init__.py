"""Export PyTorch sub-models to ncnn through pnnx, for rule files that start from a PyTorch source.

torch and pnnx are optional (``pip install -e '.[export]'``): they are imported lazily, only in this
package, so the rest of gsurg never needs them.

* ``spec``: the contract between a rule file's export source and gsurg. A source is a callable
  ``build(variables, checkpoint) -> Sequence[ExportSpec]`` named ``path/to/file.py:build`` (relative to the
  rule file; sibling modules are reachable with relative imports, ``from .model import X``) or
  ``package.module:build``; ``load_source`` finds it and ``call_source`` runs it.
* ``trace_inputs``: checks a spec and derives pnnx's two input shapes (the example one, and one where every
  symbolic dim takes another size).
* ``pnnx_run``: ``export_all(specs, work_dir)`` traces each module (``trace_all``), then runs the pnnx
  executable on each trace (``convert_all``; ``fp16=0``,
  ``inputshape``/``inputshape2``) and checks what it wrote; the result names each sub-model's
  ``.ncnn.param``/``.ncnn.bin`` inside ``work_dir`` (beside pnnx's other outputs and a ``NAME.pnnx.log``;
  the caller removes the folder, or keeps it for debugging).

Typical use::

    source = load_source("package.module:build", rule_file.parent)
    specs = call_source(source, ref, {"export_length": 8}, checkpoint_dir)
    models = export_all(specs, work_dir, progress=print)
    models["decoder"].param, models["decoder"].bin
"""
