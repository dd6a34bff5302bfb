"""tools/nnscaler - convert nnScaler execution-plan pickles into verdict plan format v1.

pickle_safe: an inert unpickler (nothing from the file is imported or executed).
convert:     the nnScaler -> verdict plan conversion.
"""
