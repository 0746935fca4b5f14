"""Support for gsurg's own tests and benchmarks (fault injection); the commands never import it."""
