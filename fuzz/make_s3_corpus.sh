#!/bin/sh
# Write the seed corpus of fuzz_s3_list: ListObjectsV2 answers, good (one
# page, a truncated page, url-encoded keys, entities, CDATA, a namespace
# prefix, an empty listing), an S3 <Error>, and damaged ones (cut, a DOCTYPE,
# mismatched tags, an unknown entity, a bad Size).
#   fuzz/make_s3_corpus.sh [OUT_DIR]        (default: build/fuzz_corpus)
# Replay (gcc build):   BUILD/fuzz/fuzz_s3_list OUT_DIR/s3_list
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../build/fuzz_corpus}/s3_list
mkdir -p "$out"
head='<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>d/</Prefix>'
c() { printf '<Contents><Key>%s</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified><ETag>&quot;x&quot;</ETag><Size>%s</Size><StorageClass>STANDARD</StorageClass></Contents>' "$1" "$2"; }
w() { printf '%s' "$2" >"$out/$1"; }
w one_page "$head<IsTruncated>false</IsTruncated>$(c d/a.tar 10)$(c d/b.tar 0)</ListBucketResult>"
w truncated "$head<IsTruncated>true</IsTruncated>$(c d/a 1)<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken></ListBucketResult>"
w url_encoded "$head<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>$(c 'd/a%20b%2Bc' 3)</ListBucketResult>"
w entities "$head<IsTruncated>false</IsTruncated>$(c 'd/&amp;&lt;&gt;&quot;&apos;&#65;&#x1F600;' 18446744073709551615)</ListBucketResult>"
w cdata "$head<IsTruncated>false</IsTruncated>$(c '<![CDATA[d/<x>]]>' 5)<!-- c --></ListBucketResult>"
w prefixed '<s3:ListBucketResult xmlns:s3="x"><s3:IsTruncated>false</s3:IsTruncated><s3:Contents><s3:Key>k</s3:Key><s3:Size>1</s3:Size></s3:Contents></s3:ListBucketResult>'
w empty_list "$head<KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>"
w error '<?xml version="1.0"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
w cut "$head<IsTruncated>false</IsTruncated>$(c d/a.tar 10)<Conte"
w doctype '<!DOCTYPE x [<!ENTITY a "aaaa">]><ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>'
w mismatched "$head<IsTruncated>false</IsTruncated></Contents></ListBucketResult>"
w unknown_entity "$head<IsTruncated>false</IsTruncated>$(c '&nbsp;' 1)</ListBucketResult>"
w bad_size "$head<IsTruncated>false</IsTruncated>$(c k 12x)</ListBucketResult>"
w empty ''
echo "wrote $(ls "$out" | wc -l) seeds to $out"
