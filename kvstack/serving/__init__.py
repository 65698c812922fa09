"""`kvstack serve`: probe -> plan -> render -> preflight -> supervise -> validate -> keep serving."""
