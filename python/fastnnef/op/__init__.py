"""Op handlers, fragments and module extractors that turn IR ops into NNEF."""
