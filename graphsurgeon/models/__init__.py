"""The model families: one folder per family (export source, config reader, reference, verifier,
``model.json`` template and schema, embedded tiny checkpoint, ``family.yaml`` manifest), and ``common`` for
what several families share (the Qwen3 layers and LLM, HF config reading, BPE helpers, verifier stages).

This is the package's top floor: a family imports the engine and ``common``, never a sibling; nothing
outside this package imports it (the engine finds a family by name through ``graphsurgeon.registry``).
Kept free of code so that looking a family's folder up runs nothing."""
