"""Order keys, and where sorted keys split: the vocabulary every layer above shares.

* :mod:`~gpusort.keys.order`: order keys of every dtype and direction;
* :mod:`~gpusort.keys.composite`: several key columns packed into one;
* :mod:`~gpusort.keys.text`: strings as fixed-width bytes;
* :mod:`~gpusort.keys.corank`: co-ranks (Merge Path), exact splitters of sorted runs, plain NumPy.
"""
