"""specdec_tools: what only the repository's maintainer runs, beside the library the course imports.

``python -m specdec_tools COMMAND`` (`specdec_tools.__main__`): ``train`` (reproduce the embedded model family, its
heads, cards and ablations: `specdec_tools.training`), ``site`` (the course as an offline static web site:
`specdec_tools.site`), ``learner-time`` (the teacher guide's minutes per notebook: `specdec_tools.learner_time`)
and ``serve`` (a load test against ``transformers serve``: `specdec_tools.serve`, its client
`specdec_tools.serve_client`). These modules import the library; the library never imports them
(tests/test_layout.py checks it).
"""
