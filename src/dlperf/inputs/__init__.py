"""Input data, framework-free: what an input pipeline is (``options``), the data sets it
reads, generated on disk (``datasets``), the page-cache control (``cache``) and the
neutral pipeline every framework's loader implements (``pipeline``)."""
