"""The bundled configs. pyproject.toml maps this folder into the package as ``testset_builder.bundled.configs``
(this file makes it importable there, so ``importlib.resources`` finds it from a wheel and from a checkout)."""
