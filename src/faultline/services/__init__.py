"""Long-running subscribers to completed episodes: the memory service (`faultline.services.memory`)
and the FAMA controller (`faultline.services.fama`). They sit above the runtime, which they use to
connect, configure and run; no in-episode agent imports them."""
