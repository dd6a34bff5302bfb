"""tools/nnscaler - convert nnScaler execution-plan pickles into verdict plan format v1.

pickle_safe: an inert unpickler (nothing from the file is imported or executed).
msgpack_w:   a small msgpack encoder (standard library only).
convert:     the nnScaler -> verdict plan conversion.
"""
