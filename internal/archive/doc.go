// Package archive keeps finished runs out of the live store: each run's
// export, one object per run, in a blob store named by a gocloud.dev/blob
// URL (file:///DIR, s3://BUCKET?endpoint=…&region=…).
package archive

import (
	_ "gocloud.dev/blob/fileblob" // file:// archives
	_ "gocloud.dev/blob/s3blob"   // s3:// archives
)
