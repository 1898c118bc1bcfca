"""Array and table files: HDF5 (:mod:`.hdf5`), Zarr (:mod:`.zarr`), ``.npy`` (:mod:`.npy`)
and Parquet (:mod:`.parquet`); what they share (:mod:`.common`) and the block cache that
keeps their decoded chunks and row groups (:mod:`.blocks`)."""
