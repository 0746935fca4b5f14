"""Graph, Layer and Blob: the IR every reader builds and every writer and rule consumes.

Blobs are SSA values named as in the .param. The graph keeps each blob's producer and consumers in sync
with every layer's inputs and outputs; nothing outside this module assigns those links. Layer order is
file order, which ncnn requires to be topological.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from graphsurgeon.errors import CatalogError, GraphError
from graphsurgeon.ir.params import Param, ncnn_view
from graphsurgeon.ir.weights import Weight
from graphsurgeon.schema.catalog import Catalog, LayerSpec, load_catalog


class Blob:
    """A named value: produced by at most one layer, read by any number of input slots."""

    __slots__ = ("consumers", "name", "producer")

    def __init__(self, name: str) -> None:
        self.name = name
        self.producer: Layer | None = None
        self.consumers: list[Layer] = []  # one entry per reading input slot

    def __repr__(self) -> str:
        producer = self.producer.name if self.producer else None
        return f"Blob({self.name!r}, producer={producer!r}, consumers={[c.name for c in self.consumers]})"


class Layer:
    """One layer line: type, name, input and output blobs, params by id, weights by slot name."""

    __slots__ = ("_graph", "_inputs", "_outputs", "line", "name", "params", "type", "weights")

    def __init__(self, graph: Graph, layer_type: str, name: str, params: Mapping[int, Param] | None) -> None:
        self._graph = graph
        self.type = layer_type
        self.name = name
        self._inputs: list[Blob] = []
        self._outputs: list[Blob] = []
        self.params: dict[int, Param] = dict(params or {})
        self.weights: dict[str, Weight] = {}
        self.line = 0  # source line, 0 when made by code

    @property
    def inputs(self) -> tuple[Blob, ...]:
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[Blob, ...]:
        return tuple(self._outputs)

    @property
    def spec(self) -> LayerSpec | None:
        """The catalog entry for this type, or None for a custom (unknown) layer type."""
        return self._graph.catalog.get(self.type)

    def _require_spec(self) -> LayerSpec:
        spec = self.spec
        if spec is None:
            raise CatalogError(
                f"layer {self.name}: type {self.type!r} is not in the catalog (a custom layer)"
            )
        return spec

    def env(self) -> dict[str, Any]:
        """Effective params by name (as ncnn would see them) plus the catalog's derived values."""
        spec = self._require_spec()
        explicit = {
            pid: ncnn_view(spec.params[pid], p) for pid, p in self.params.items() if pid in spec.params
        }
        return spec.env(explicit)

    def get(self, name: str) -> Any:
        """The effective value of param ``name``: the literal if present, else the catalog default."""
        spec = self._require_spec()
        pspec = spec.param(name)
        if pspec.id in self.params:
            return ncnn_view(pspec, self.params[pspec.id])
        return self.env()[name]

    def set(self, name: str, value: Any) -> None:
        """Set param ``name``, typed as the catalog says."""
        pspec = self._require_spec().param(name)
        try:
            self.params[pspec.id] = Param.of(pspec.type, value)
        except (TypeError, ValueError):
            raise CatalogError(
                f"layer {self.name}: {value!r} is not a valid {pspec.type.value} for {self.type}.{name}"
            ) from None

    def unset(self, name: str) -> None:
        """Remove param ``name`` so the layer sees its default."""
        self.params.pop(self._require_spec().param(name).id, None)

    def __repr__(self) -> str:
        ins = [b.name for b in self._inputs]
        outs = [b.name for b in self._outputs]
        return f"Layer({self.type} {self.name!r} {ins} -> {outs})"


class Graph:
    """An ordered list of layers and the blobs between them."""

    __slots__ = ("_blobs", "catalog", "issues", "layers", "notes", "source")

    def __init__(self, catalog: Catalog | None = None, *, source: str | None = None) -> None:
        self.catalog = catalog if catalog is not None else load_catalog()
        self.source = source  # the .param this graph was read from, for messages
        self.layers: list[Layer] = []
        self._blobs: dict[str, Blob] = {}
        self.notes: list[str] = []  # warnings a reader found (ignored trailing layers, …)
        self.issues: list[Any] = []  # problems a lenient reader recorded instead of raising (ParseIssue)

    # ---- lookup -------------------------------------------------------------------------------------------
    @property
    def blobs(self) -> Mapping[str, Blob]:
        return self._blobs

    def blob(self, name: str) -> Blob:
        try:
            return self._blobs[name]
        except KeyError:
            raise GraphError(f"no blob named {name!r}") from None

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise GraphError(f"no layer named {name!r}")

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def input_blobs(self) -> list[Blob]:
        """Blobs produced by Input layers, in order."""
        return [b for layer in self.layers if layer.type == "Input" for b in layer._outputs]

    def output_blobs(self) -> list[Blob]:
        """Leaf blobs: produced and never read. ncnn has no output list; these are its candidates."""
        return [b for layer in self.layers for b in layer._outputs if not b.consumers]

    # ---- edits (the only code that touches links) ---------------------------------------------------------
    def _get_or_make(self, name: str) -> Blob:
        blob = self._blobs.get(name)
        if blob is None:
            blob = self._blobs[name] = Blob(name)
        return blob

    def add_layer(
        self,
        layer_type: str,
        name: str,
        inputs: Iterable[str],
        outputs: Iterable[str],
        params: Mapping[int, Param] | None = None,
        *,
        index: int | None = None,
    ) -> Layer:
        """Append (or insert at ``index``) a layer; its outputs must be names no other layer produces."""
        outputs = list(outputs)
        for out in outputs:
            existing = self._blobs.get(out)
            if existing is not None and existing.producer is not None:
                raise GraphError(
                    f"layer {name}: blob {out!r} is already produced by layer {existing.producer.name}"
                )
        if len(set(outputs)) != len(outputs):
            raise GraphError(f"layer {name}: lists the same top twice")
        layer = Layer(self, layer_type, name, params)
        for inp in inputs:
            blob = self._get_or_make(inp)
            layer._inputs.append(blob)
            blob.consumers.append(layer)
        for out in outputs:
            blob = self._get_or_make(out)
            blob.producer = layer
            layer._outputs.append(blob)
        if index is None:
            self.layers.append(layer)
        else:
            self.layers.insert(index, layer)
        return layer

    def remove_layer(self, layer: Layer) -> None:
        """Remove a layer; blobs left with neither producer nor consumer disappear."""
        self.layers.remove(layer)
        for blob in layer._inputs:
            blob.consumers.remove(layer)
            self._drop_if_orphan(blob)
        for blob in layer._outputs:
            blob.producer = None
            self._drop_if_orphan(blob)
        layer._inputs.clear()
        layer._outputs.clear()

    def append_input(self, layer: Layer, blob_name: str) -> None:
        """Add a bottom to ``layer`` after its existing ones, reading ``blob_name`` (made if new)."""
        blob = self._get_or_make(blob_name)
        layer._inputs.append(blob)
        blob.consumers.append(layer)

    def append_output(self, layer: Layer, blob_name: str) -> None:
        """Add a top to ``layer`` after its existing ones; the name must not be produced elsewhere (a blob
        read before anything produced it gets ``layer`` as its producer)."""
        existing = self._blobs.get(blob_name)
        if existing is not None and existing.producer is not None:
            by = existing.producer.name
            raise GraphError(f"layer {layer.name}: blob {blob_name!r} is already produced by layer {by}")
        blob = self._get_or_make(blob_name)
        blob.producer = layer
        layer._outputs.append(blob)

    def copy(self) -> Graph:
        """An independent graph with the same layers, links, params and weights. Weights are shared (they
        are never modified in place: actions replace a slot's Weight)."""
        twin = Graph(self.catalog, source=self.source)
        for layer in self.layers:
            made = twin.add_layer(
                layer.type, layer.name, [b.name for b in layer._inputs], [b.name for b in layer._outputs]
            )
            made.params = dict(layer.params)
            made.weights = dict(layer.weights)
            made.line = layer.line
        twin.notes = list(self.notes)
        twin.issues = list(self.issues)
        return twin

    def set_input(self, layer: Layer, position: int, blob_name: str) -> None:
        """Make input slot ``position`` of ``layer`` read ``blob_name``."""
        old = layer._inputs[position]
        new = self._get_or_make(blob_name)
        old.consumers.remove(layer)
        layer._inputs[position] = new
        new.consumers.append(layer)
        self._drop_if_orphan(old)

    def rename_blob(self, old: str, new: str) -> None:
        """Rename a blob everywhere; the new name must be free."""
        if new in self._blobs:
            raise GraphError(f"cannot rename blob {old!r} to {new!r}: that name is taken")
        blob = self.blob(old)
        del self._blobs[old]
        blob.name = new
        self._blobs[new] = blob

    def _drop_if_orphan(self, blob: Blob) -> None:
        if blob.producer is None and not blob.consumers and self._blobs.get(blob.name) is blob:
            del self._blobs[blob.name]

    # ---- comparison ---------------------------------------------------------------------------------------
    def signature(self) -> tuple[Any, ...]:
        """A value equal for two graphs with the same layers, links and params (weights excluded)."""
        return tuple(
            (
                layer.type,
                layer.name,
                tuple(b.name for b in layer._inputs),
                tuple(b.name for b in layer._outputs),
                tuple(sorted(layer.params.items())),
            )
            for layer in self.layers
        )

    def check_links(self) -> None:
        """Assert the producer/consumer links agree with every layer's inputs and outputs."""
        for blob in self._blobs.values():
            if blob.producer is not None and blob not in blob.producer._outputs:
                raise GraphError(f"blob {blob.name}: producer link is stale")
            for consumer in blob.consumers:
                if blob not in consumer._inputs:
                    raise GraphError(f"blob {blob.name}: consumer link to {consumer.name} is stale")
        for layer in self.layers:
            for blob in layer._inputs:
                if self._blobs.get(blob.name) is not blob or blob.consumers.count(
                    layer
                ) != layer._inputs.count(blob):
                    raise GraphError(f"layer {layer.name}: input {blob.name} is not linked")
            for blob in layer._outputs:
                if self._blobs.get(blob.name) is not blob or blob.producer is not layer:
                    raise GraphError(f"layer {layer.name}: output {blob.name} is not linked")
