"""NNEF file-level IO under torch_to_nnef's module path (``torch_to_nnef.nnef_io``):
``tensor`` reads and writes the 128-byte header of ``.dat`` tensor files. fastnnef's
writer itself is the Rust sink (``fastnnef._native``); this package is for code that
inspects artefacts the reference's way."""
