"""specdec_lib: the library behind the specdec course on speculative decoding."""
