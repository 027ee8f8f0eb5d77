"""Clustering: brokers that share load (DESIGN.md §3 layer 5).

`config` holds the validated settings; `topology`, `discovery`, `link`, `bridge` and
`connection` the asyncio machinery that composes the post office's remote bindings.
"""
