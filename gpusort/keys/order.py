"""Order keys: one ascending order for every key dtype, direction and tie rule.

The pipeline sorts *order keys* instead of user keys.  ``encode`` maps a key
array to an array whose ascending sort is the order the user asked for;
``decode`` is its inverse.  So the splitters, the merges and every backend
only ever need one comparison, ascending, and never see a float, a NaN or a
descending order unless a scheme asks for it.

Floats get *integer* order keys: a backend's integer sort cannot misplace
``-0.0`` or NaN (NumPy's SIMD float16 sort does, on some CPUs), and an
integer map is exact where float arithmetic is not (negating a NaN may
rewrite its bits).  Three schemes, by what the sort must keep:

``"exact"`` (keys only: ``sort``)
    A bijection onto unsigned integers of the key's width, so the output holds
    exactly the input's bits.  Ascending: ``-inf … -0.0, 0.0 … inf`` then
    every NaN; descending: ``inf … 0.0, -0.0 … -inf`` then every NaN.  Equal
    keys are equal bits, so no tie order is needed.
``"tied"`` (stable, keys not returned: ``argsort``)
    ``"exact"`` after mapping ``-0.0`` to ``0.0`` and every NaN to one NaN:
    those ties keep input order, as ``np.argsort(kind="stable")``.
``"float"`` (stable, keys returned: ``sort_by_key``)
    The floats themselves, compared as floats (NaN last, ``-0.0 == 0.0``),
    descending by flipping the sign bit of every non-NaN key; decoding flips
    it back, so every bit survives.  Backends sort these with their stable,
    comparison-based sorts only.

Integers, bool, datetime64 and timedelta64 have one scheme: their order keys
are exact and equal keys are equal bits.

=================  ===============  ========================================
key dtype          order dtype      descending
=================  ===============  ========================================
int*, uint*        same             ``~x`` (reverses two's complement order)
bool               uint8            ``~x``
datetime64, NaT    int64            ``~x``; ascending ``x - 1`` moves NaT
timedelta64                         (int64 min) to the top, as NumPy does
float16/32/64      uint16/32/64     see the schemes above
=================  ===============  ========================================

All operations are elementwise array methods and operators, so NumPy and
CuPy arrays both work.  Order keys are always in native byte order: ``encode``
swaps big-endian keys once, and ``decode`` swaps them back to the user's dtype.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from gpusort.arrays import namespace, to_numpy

_FLOAT_WIDTHS, _COMPLEX_WIDTHS = (2, 4, 8), (8, 16)  # bytes: float16/32/64, complex64/128
SCHEMES = ("exact", "tied", "float")
Scheme = Literal["exact", "tied", "float"]


def check_key_dtype(dtype: Any, argname: str = "x", composite_ok: bool = False) -> np.dtype:
    """The key dtype, or a ``TypeError`` that names ``argname``, the dtypes taken here and the fix.

    Complex, fixed-width bytes (``S``), str (``U``), raw void and structured
    keys (:func:`is_composite`) are sorted by the functions that take
    composite keys, and pass here with ``composite_ok``; a structured
    dtype's fields must be keys too.

    Examples
    --------
    >>> check_key_dtype(">f4")
    dtype('>f4')
    >>> check_key_dtype("U3", "keys", composite_ok=True)
    dtype('<U3')
    >>> check_key_dtype("U3", "keys")
    Traceback (most recent call last):
    TypeError: keys has dtype <U3 (string), which gpusort cannot sort as keys here (gpusort.sort, argsort, ...
    """
    dtype = np.dtype(dtype)
    # Kind and width decide, never a byte-order swap: variable-width dtypes (StringDType) have none.
    if dtype.kind in "iubmM" or (dtype.kind == "f" and dtype.itemsize in _FLOAT_WIDTHS):
        return dtype
    composite = (dtype.kind == "c" and dtype.itemsize in _COMPLEX_WIDTHS) or (dtype.kind in "SUV" and dtype.itemsize)
    if composite_ok and composite:
        for name in dtype.names or ():
            field, what = dtype.fields[name][0], f"{argname}[{name!r}]"
            if field.subdtype:  # NumPy compares a sub-array field's raw bytes: any fixed-width one sorts
                if field.hasobject:
                    check_key_dtype(field.base, what, composite_ok=True)
                continue
            if field.kind == "f" and field.itemsize == 2:
                raise TypeError(
                    f"{what} is a float16 field, which NumPy orders with NaN first inside a structured key (and "
                    "last everywhere else), so gpusort does not sort by it: make the field float32 first "
                    f"(e.g. {argname}.astype([... ({name!r}, 'f4') ...]))")
            # Any other field is ordered by its own rule: it must be a key.
            check_key_dtype(field, what, composite_ok=True)
        return dtype
    what = {
        "O": "object",
        "U": "string",
        "T": "string",
        "S": "bytes",
        "V": "structured" if dtype.names is not None else "void",
        "c": "extended-precision complex" if dtype.itemsize not in _COMPLEX_WIDTHS else "complex",
        "f": "extended-precision float",
    }.get(dtype.kind, f"kind {dtype.kind!r}")
    where = (" here (gpusort.sort, argsort, lexsort and sort_by_key take complex, bytes, str and structured keys)"
             if composite else "")
    if dtype.kind in "SUV" and not dtype.itemsize:
        where = " (it holds no bytes: every key would tie)"
    taken = ("float16/32/64, complex64/128, fixed-width bytes (S), str (U), void (V), structured (of these),"
             if composite_ok else "float16/32/64,")
    fix = f"{argname}.astype('U')" if composite_ok and dtype.kind in "OT" else f"{argname}.astype('float64')"
    raise TypeError(
        f"{argname} has dtype {dtype} ({what}), which gpusort cannot sort as keys{where}; "
        f"supported key dtypes are bool, int8-64, uint8-64, {taken} datetime64 "
        f"and timedelta64 (convert first, e.g. {fix})"
    )


def is_composite(dtype: Any) -> bool:
    """Whether keys of ``dtype`` sort as several order-key columns (:func:`key_columns`), packed into composite keys.

    Complex keys (three columns), and fixed-width bytes, str, void and
    structured keys (a column per 64 bits, or per field): their order keys
    do not decode back to the keys, so sorts carry the keys as values.

    Examples
    --------
    >>> is_composite("c8"), is_composite("S9"), is_composite("i4,f8"), is_composite("f8")
    (True, True, True, False)
    """
    return np.dtype(dtype).kind in "cSUV"


def scheme_for(stable: bool, keys_returned: bool) -> Scheme:
    """The order-key scheme a sort needs: see the module docstring.

    A sort that returns the keys keeps every bit of them and puts keys that
    are equal but differ in bits (``-0.0`` and ``0.0``, NaNs of other
    payloads) in input order, as ``np.sort(kind="stable")`` does: scheme
    ``"float"``, whether or not values come along.  A sort that returns
    positions only needs the ties: ``"tied"``.  Keys other than floats have
    one scheme whatever is asked (equal keys are equal bits).

    Examples
    --------
    >>> scheme_for(stable=False, keys_returned=True), scheme_for(True, False), scheme_for(True, True)
    ('float', 'tied', 'float')
    """
    return "float" if keys_returned else "tied"


def tie_keys(okeys: Any, dtype: Any, descending: bool, searchsorted: Any) -> set[int]:
    """The order keys of ``dtype``'s tie classes present in a sorted run of ``"exact"`` order keys.

    The tie classes are the keys that are equal but differ in bits: the two
    zeros and the NaNs.  Found with ``searchsorted`` (a backend's, so the
    run stays where it is): the two zeros' keys that are present, and the
    first and last NaN's.  Runs whose classes hold one key in all sort the
    same in ``"exact"`` order as in input order: nothing tied differs.

    Examples
    --------
    >>> x = np.array([np.nan, -0.0, 2.0, 0.0])
    >>> ok = np.sort(encode(x, False, "exact"))
    >>> len(tie_keys(ok, x.dtype, False, np.searchsorted))  # both zeros, one NaN
    3
    """
    dtype = np.dtype(dtype)
    if dtype.kind != "f" or not len(okeys):
        return set()
    zeros = encode(np.array([-0.0, 0.0], dtype), descending, "exact")
    last_number = encode(np.array([np.inf, -np.inf], dtype), descending, "exact").max()
    probes = np.concatenate([zeros, [last_number]]).astype(okeys.dtype)
    left = [int(i) for i in np.asarray(to_numpy(searchsorted(okeys, probes, "left")))]
    right = [int(i) for i in np.asarray(to_numpy(searchsorted(okeys, probes, "right")))]
    present = {int(z) for z, a, b in zip(zeros, left, right) if b > a}
    first_nan = right[2]
    if first_nan < len(okeys):
        present |= {int(to_numpy(okeys[first_nan])), int(to_numpy(okeys[len(okeys) - 1]))}
    return present


def ties_differ(keys: set[int], dtype: Any, descending: bool) -> bool:
    """Whether :func:`tie_keys` of all runs together hold two keys of one class.

    Examples
    --------
    >>> both_zeros = {int(z) for z in encode(np.array([-0.0, 0.0]), False, "exact")}
    >>> ties_differ(both_zeros, np.float64, False), ties_differ(set(), np.float64, False)
    (True, False)
    """
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        return False
    zeros = {int(z) for z in encode(np.array([-0.0, 0.0], dtype), descending, "exact")}
    return len(keys & zeros) > 1 or len(keys - zeros) > 1


def order_dtype(dtype: Any, scheme: Scheme = "tied") -> np.dtype:
    """The dtype of the order keys that ``encode`` makes from ``dtype`` keys."""
    dtype = np.dtype(dtype).newbyteorder("=")
    if dtype.kind == "b":
        return np.dtype(np.uint8)
    if dtype.kind in "mM":
        return np.dtype(np.int64)
    if dtype.kind == "f" and scheme != "float":
        return np.dtype(f"u{dtype.itemsize}")
    return dtype


def encode(keys: Any, descending: bool, scheme: Scheme = "tied") -> Any:
    """Order keys for ``keys``; a view (no copy) where nothing changes.

    Examples
    --------
    >>> x = np.array([1.0, np.nan, -0.0, -2.0, 0.0])
    >>> np.argsort(encode(x, False), kind="stable").tolist()      # NaN last, the zeros tied
    [3, 2, 4, 0, 1]
    >>> np.argsort(encode(x, True, "exact"), kind="stable").tolist()  # 0.0 before -0.0
    [0, 4, 2, 3, 1]
    """
    _check_scheme(scheme)
    if not keys.dtype.isnative:
        # Merges concatenate runs, and concatenation yields native byte order:
        # swapping once here keeps the order keys' dtype what order_dtype says.
        keys = keys.astype(keys.dtype.newbyteorder("="))
    kind = keys.dtype.kind
    if kind == "f":
        return _encode_float(keys, descending, scheme)
    if kind == "b":
        keys = keys.view(np.uint8)
    elif kind in "mM":
        keys = keys.view(np.int64)
        return ~keys if descending else keys - 1
    return ~keys if descending else keys


def encode_temporaries(dtype: Any, descending: bool, scheme: Scheme = "tied") -> int:
    """How many arrays the size of the keys :func:`encode` or :func:`decode` of ``dtype`` keys may make at once.

    None where the order keys are a view of the keys (integers and
    booleans, ascending); floats' and descending keys' are new arrays, and
    ``"tied"`` floats pass through a few.

    Examples
    --------
    >>> encode_temporaries("int64", False), encode_temporaries("int64", True), encode_temporaries("float32", False)
    (0, 2, 3)
    """
    kind = np.dtype(dtype).kind
    if kind in "iub" and not descending:
        return 0
    return 3 if kind == "f" and scheme == "tied" else 2


def decode(okeys: Any, dtype: Any, descending: bool, scheme: Scheme = "tied") -> Any:
    """User keys of ``dtype`` back from order keys: the inverse of ``encode``.

    Exact for every scheme but ``"tied"``, which returns ``0.0`` for either
    zero and one NaN for every NaN (it serves sorts that return positions).
    """
    _check_scheme(scheme)
    dtype = np.dtype(dtype)
    native = dtype.newbyteorder("=")
    if native.kind in "mM":
        keys = (~okeys if descending else okeys + 1).view(native)
    elif native.kind == "f":
        keys = _decode_float(okeys, native, descending, scheme)
    else:
        if descending:
            okeys = ~okeys
        keys = okeys.view(native) if okeys.dtype != native else okeys
    return keys if native == dtype else keys.astype(dtype)


def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r} is not an order-key scheme; use one of {SCHEMES}")


class FloatBits:
    """The bit layout of one float dtype, as unsigned integer constants.

    Examples
    --------
    >>> b = FloatBits(np.dtype(np.float16))
    >>> b.uint, hex(b.sign), hex(b.inf), int(b.nans)
    (dtype('uint16'), '0x8000', '0x7c00', 1023)
    """

    def __init__(self, dtype: np.dtype):
        self.uint = np.dtype(f"u{dtype.itemsize}")
        self.int = np.dtype(f"i{dtype.itemsize}")
        self.shift = self.int.type(8 * dtype.itemsize - 1)
        self.sign = self.uint.type(1 << (8 * dtype.itemsize - 1))
        # Scalars, not 0-d arrays: CuPy takes NumPy scalars as operands, not arrays.
        self.inf = inf = np.array(np.inf, dtype).view(self.uint)[()]
        self.magnitude = self.uint.type(int(self.sign) - 1)
        # How many NaN bit patterns one sign has: every magnitude above inf's.
        self.nans = self.uint.type(int(self.sign) - 1 - int(inf))
        self.canonical_nan = np.array(np.nan, dtype).view(self.uint)[()]

    def signs(self, u: Any) -> Any:
        """All ones where ``u``'s sign bit is set, else zero (an arithmetic shift)."""
        return (u.view(self.int) >> self.shift).view(self.uint)


def _flip_non_nan(x: Any, b: FloatBits) -> Any:
    """``x`` with the sign bit of every non-NaN flipped: descending order for scheme ``"float"``, and its inverse."""
    return (x.view(b.uint) ^ (b.sign * (x == x).astype(b.uint))).view(x.dtype)


def _encode_float(keys: Any, descending: bool, scheme: Scheme) -> Any:
    b = FloatBits(keys.dtype)
    if scheme == "float":
        return _flip_non_nan(keys, b) if descending else keys
    u = keys.view(b.uint)
    if scheme == "tied":
        # One bit pattern per tie class: both zeros become +0.0 (all bits
        # clear), every NaN the canonical one.  Integer arithmetic on masks
        # (it wraps modulo 2^bits) rather than `where`: NumPy and CuPy alike.
        # The tests read the bits, not the floats: a GPU's float compare may
        # flush subnormals to zero and tie them with the zeros.
        magnitude = u & b.magnitude
        u = u * (magnitude != 0).astype(b.uint)
        u = u + (magnitude > b.inf).astype(b.uint) * (b.canonical_nan - u)
    # The classic float-to-integer map (negatives: all bits flipped; positives:
    # the sign bit set) orders -NaN < -inf < … < -0 < +0 < … < inf < +NaN; the
    # negative NaNs sit at the bottom, so subtracting their count (modulo 2^bits)
    # rotates them to the top: NaN last, a bijection.  Descending reverses the
    # classic map first, which puts +NaN at the bottom instead; the same rotation
    # moves it up.
    t = u ^ (b.signs(u) | b.sign)
    if descending:
        t = ~t
    return t - b.nans


def _decode_float(okeys: Any, dtype: np.dtype, descending: bool, scheme: Scheme) -> Any:
    b = FloatBits(dtype)
    if scheme == "float":
        return _flip_non_nan(okeys, b).view(dtype) if descending else okeys
    t = okeys + b.nans
    if descending:
        t = ~t
    # A set top bit marks a non-negative key (its sign bit was set by encode).
    return (t ^ (~b.signs(t) | b.sign)).view(dtype)


def key_columns(keys: Any, descending: bool, scheme: Scheme = "tied") -> tuple[list, list[int]]:
    """Unsigned order-key columns of ``keys`` and their bit widths, most significant first.

    One column, :func:`encode`'s, for every real dtype; three for complex
    keys (:func:`complex_columns`); for bytes, str, void and structured keys
    those of :func:`fixed_width_columns`.  :class:`gpusort.keys.composite.Layout` packs
    them next to other columns.

    Columns are unsigned, as a layout packs them: the signed order keys of
    integers, datetime64 and timedelta64 have their sign bit flipped, which
    maps two's complement order onto unsigned order.
    :func:`decode_column` is the inverse for real dtypes.

    Examples
    --------
    >>> columns, widths = key_columns(np.array([-5, 3, -128], np.int8), False)
    >>> columns[0].tolist(), widths
    ([123, 131, 0], [8])
    """
    if keys.dtype.kind == "c":
        return complex_columns(keys, descending)
    if keys.dtype.kind in "SUV":
        return fixed_width_columns(keys, descending)
    okeys = encode(keys, descending, scheme)
    if okeys.dtype.kind == "i":
        okeys = okeys.view(f"u{okeys.dtype.itemsize}") ^ _sign_bit(okeys.dtype)
    return [okeys], key_widths(keys.dtype, descending)


def key_widths(dtype: Any, descending: bool) -> list[int]:
    """The bit widths of :func:`key_columns`' columns for keys of ``dtype``.

    Examples
    --------
    >>> key_widths(np.bool_, False), key_widths(np.float32, True), key_widths(np.complex64, False)
    ([1], [32], [2, 32, 32])
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        part = 4 * dtype.itemsize  # half the width, in bits
        return [2, part, part]
    if dtype.names is not None:
        fields = [dtype.fields[name][0] for name in dtype.names]
        return [w for f in fields for w in (byte_widths(f.itemsize) if f.subdtype else key_widths(f, descending))]
    if dtype.kind in "SUV":
        return byte_widths(dtype.itemsize)
    if dtype.kind == "b" and not descending:  # False, True: 0 and 1 (descending flips all eight bits)
        return [1]
    return [8 * order_dtype(dtype).itemsize]


def decode_column(column: Any, dtype: Any, descending: bool, scheme: Scheme = "tied") -> Any:
    """Keys of real ``dtype`` back from their :func:`key_columns` column, of any unsigned dtype that holds it.

    Examples
    --------
    >>> x = np.array([-5, 3, -128], np.int8)
    >>> decode_column(key_columns(x, True)[0][0].astype(np.uint64), x.dtype, True).tolist()
    [-5, 3, -128]
    """
    odtype = order_dtype(dtype, scheme)
    okeys = column.astype(f"u{odtype.itemsize}")
    if odtype.kind == "i":
        okeys = (okeys ^ _sign_bit(odtype)).view(odtype)
    return decode(okeys, dtype, descending, scheme)


def _sign_bit(dtype: np.dtype) -> Any:
    """The sign bit of integers of ``dtype``'s width, as an unsigned scalar."""
    return np.dtype(f"u{dtype.itemsize}").type(1 << (8 * dtype.itemsize - 1))


def complex_columns(keys: Any, descending: bool) -> tuple[list, list[int]]:
    """NumPy's order of complex keys as three order-key columns: class, first part, second part.

    NumPy sorts complex numbers lexicographically, real part first, and puts
    those with NaN parts last, in classes: ``[R + Rj, R + nanj, nan + Rj,
    nan + nanj]`` (``R`` any non-NaN), each class ordered by its non-NaN
    parts.  So the columns are the class (2 bits), then the real part (the
    imaginary one in class ``nan + Rj``), then the imaginary part (class
    ``R + Rj`` only), each part an order key of scheme ``"tied"``: ``-0.0``
    equals ``0.0`` and NaNs are one key, as NumPy compares them.
    Descending reverses the parts' order within each class; the classes
    with NaN stay last, as NaN does for real keys.

    Examples
    --------
    >>> x = np.array([complex(np.nan, 1), 2 + 0j, complex(1, np.nan), 1 + 5j])
    >>> columns, widths = complex_columns(x, False)
    >>> np.lexsort(columns[::-1]).tolist(), widths
    ([3, 1, 2, 0], [2, 64, 64])
    """
    if not keys.dtype.isnative:
        keys = keys.astype(keys.dtype.newbyteorder("="))
    re, im = keys.real, keys.imag
    nan_re, nan_im = re != re, im != im
    cls = nan_re.astype(np.uint8) * np.uint8(2) + nan_im.astype(np.uint8)
    xp = namespace(keys)
    first = encode(xp.where(nan_re, im, re), descending, "tied")  # the imaginary part where re is NaN
    # Only class 0 has a second part: elsewhere one constant (zero) leaves the tie to the input order.
    second = encode(im, descending, "tied") * (cls == 0).astype(first.dtype)
    bits = 8 * first.dtype.itemsize
    return [cls, first, second], [2, bits, bits]


WORD_BYTES = 8


def byte_widths(nbytes: int) -> list[int]:
    """Bit widths of :func:`byte_columns` of ``nbytes`` bytes: 64 per whole word, the rest's bits last.

    Examples
    --------
    >>> byte_widths(9), byte_widths(16)
    ([64, 8], [64, 64])
    """
    whole, rest = divmod(int(nbytes), WORD_BYTES)
    return [64] * whole + ([8 * rest] if rest else [])


def byte_columns(b: np.ndarray, descending: bool) -> list[np.ndarray]:
    """Unsigned order-key columns of byte strings: ``b`` is uint8 of shape ``(..., nbytes)``, first byte most significant.

    Byte strings compare as ``memcmp``, unsigned byte by byte, so their
    order is that of their bytes read as big-endian 64-bit words, most
    significant first; the last word holds only the bytes left over, moved
    to its low end so its column is as narrow as they are
    (:func:`byte_widths`: 1 to 8 bytes sort as one integer).  Descending
    flips every bit of each column's width.  Host (NumPy) arrays only: CuPy
    has no byte strings to sort.

    Examples
    --------
    >>> b = np.frombuffer(b"ab\\x00ba\\x00a\\x00b", np.uint8).reshape(3, 3)
    >>> columns = byte_columns(b, False)
    >>> [hex(int(k)) for k in columns[0]], np.lexsort(columns[::-1]).tolist()
    (['0x616200', '0x626100', '0x610062'], [2, 0, 1])
    """
    nbytes = b.shape[-1]
    widths = byte_widths(nbytes)
    padded = np.zeros(b.shape[:-1] + (len(widths) * WORD_BYTES,), np.uint8)
    padded[..., :nbytes] = b
    words = padded.view(">u8").astype(np.uint64)  # most significant byte first: the bytes' order as integers
    columns = [np.ascontiguousarray(words[..., q]) for q in range(len(widths))]
    if nbytes % WORD_BYTES:
        columns[-1] >>= np.uint64(64 - widths[-1])
    if descending:
        columns = [~c & np.uint64((1 << w) - 1) for c, w in zip(columns, widths)]
    return columns


def fixed_width_columns(keys: np.ndarray, descending: bool) -> tuple[list, list[int]]:
    """NumPy's order of bytes, str, void and structured keys as order-key columns, and their widths.

    * ``S`` and raw ``V`` (void): the bytes, compared unsigned, NUL padding
      and all (``b"a"`` and ``b"a\\x00"`` are the same key; an embedded NUL
      is a byte like any other): :func:`byte_columns`.
    * ``U``: UCS-4 code points compared as unsigned 32-bit integers, so
      their bytes written big-endian, whatever the keys' byte order.
    * Structured: the fields' columns in field order, each field by its own
      rule (NumPy's comparison of structured keys): a float field with
      ``-0.0 == 0.0`` and one NaN last (scheme ``"tied"``), nested fields
      the same way; a sub-array field by its raw bytes, as NumPy compares
      it (``memcmp``: the byte order decides).

    Descending reverses each column's order: the bytes' and code points'
    order, and each field's as it would alone (NaN still last).  The keys
    carry themselves through a sort: ties in these columns are keys NumPy
    calls equal, which need not be equal bits (``-0.0`` and ``0.0``).

    Examples
    --------
    >>> x = np.array([(np.nan, 1), (-0.0, 2), (0.0, 1), (-1.0, 5)], [("f", "<f8"), ("i", "<i8")])
    >>> columns, widths = fixed_width_columns(x, False)
    >>> np.lexsort(columns[::-1]).tolist(), np.argsort(x, kind="stable").tolist(), widths
    ([3, 2, 1, 0], [3, 2, 1, 0], [64, 64])
    >>> columns, widths = fixed_width_columns(np.array(["b", "\\xe9", "ab"], ">U2"), False)
    >>> np.lexsort(columns[::-1]).tolist(), widths
    ([2, 0, 1], [64])
    """
    dtype = keys.dtype
    if dtype.names is None:
        if dtype.kind == "U":
            keys = keys.astype(dtype.newbyteorder(">"))
        b = np.ascontiguousarray(keys).view(np.uint8).reshape(keys.shape + (dtype.itemsize,))
        return byte_columns(b, descending), byte_widths(dtype.itemsize)
    columns, widths = [], []
    for name in dtype.names:
        field = keys[name]
        sub = dtype.fields[name][0]
        if sub.subdtype:
            field = np.ascontiguousarray(field).view(np.uint8).reshape(keys.shape + (sub.itemsize,))
            c, w = byte_columns(field, descending), byte_widths(sub.itemsize)
        else:
            c, w = key_columns(field, descending, "tied")
        columns += c
        widths += w
    return columns, widths

