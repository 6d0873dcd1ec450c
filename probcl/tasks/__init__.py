"""What a user asks probcl to do, one module each: pretrain, evaluate, score, sample, export, benchmark."""
