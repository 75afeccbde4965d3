"""The ``flashio`` command (``main``) and the options its verbs share (``options``)."""
