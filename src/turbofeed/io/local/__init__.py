"""Local files: WebDataset tar shards (:mod:`.tar`) and their index (:mod:`.index`),
compressed shards (:mod:`.compressed`), ImageFolder trees (:mod:`.folder`), the open
files and maps every local read goes through (:mod:`.files`), and writing shards
(:mod:`.writer`)."""
