"""The audio endpoints' wire formats, pure (no I/O): speech requests and their content types
(`speech`), transcription form fields (`transcription`), transcript renderings (`transcript`)
and an audio file's duration read from its header (`duration`)."""
