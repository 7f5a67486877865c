"""Running ncu over a program: the plan (phases, dedup filters), the command lines, progress, doctor."""
