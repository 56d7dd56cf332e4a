//! Input data: the generic one-candidate-per-line JSONL format, and readers that turn the
//! shared human-judgement sets (SummEval, Topical-Chat, WebNLG) into it.
