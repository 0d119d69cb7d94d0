"""Publishing: what leaves the package for the Hub or for `evaluate`.

`hub.py` pushes confidence models, HonestyBench folders, metric Spaces and the gate Space (one commit each);
`dataset_card.py` writes a HonestyBench dataset folder with its card; `metric_cards.py` renders the metric cards and
assembles metric Space folders; `metric_modules.py` puts the `evaluate` metric modules into evaluate's module cache
(`elical-hf install-metrics`). The metrics themselves (the maths and each evaluate module's script) live in
`elical_hf/metrics/`, which imports nothing from here. The public names are re-exported by `elical_hf/__init__.py`.
"""
